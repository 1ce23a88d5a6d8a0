"""``python -m zerounlearn_editor`` runs the ``zerounlearn`` command."""
import sys

from .cli import main

sys.exit(main())
