"""``python -m zerounlearn_editor`` runs the ``zerounlearn`` command."""
import sys

from zerounlearn_editor.cli import main

sys.exit(main())
