"""Where the package meets other tools (its plugin surface): EasyEdit registration, PEFT LoRA adapters."""
