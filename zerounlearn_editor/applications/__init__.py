"""Jobs built on the library: ``zerounlearn unlearn`` (with the ledger of the folder it writes) and EasyEdit's
evaluation script for any registered method."""
