"""The ``zerounlearn`` command line: one module per subcommand (:mod:`zerounlearn_editor.cli.main` dispatches)."""
from __future__ import annotations

from zerounlearn_editor.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
