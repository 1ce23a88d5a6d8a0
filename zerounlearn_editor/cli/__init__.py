"""The ``zerounlearn`` command line: a module per subcommand (stats-merge in stats, bench-speed in bench);
:mod:`zerounlearn_editor.cli.main` dispatches."""
from __future__ import annotations

from zerounlearn_editor.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
