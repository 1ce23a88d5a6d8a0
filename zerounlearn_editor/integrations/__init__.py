"""Where the package meets other tools: EasyEdit (registration, eval script), PEFT adapters, the unlearn job."""
