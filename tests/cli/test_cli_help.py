"""``zerounlearn --help`` and every subcommand's ``--help`` print their help (argparse formats every help
string with ``%``: a stray ``%`` in one of them used to crash the top-level help)."""
from __future__ import annotations

import argparse

import pytest

from zerounlearn_editor.cli import build_parser, main


def _subcommands():
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001 - argparse has no public accessor
    return sorted(actions[0].choices)


def test_top_level_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in _subcommands()) and "robustness audit: % of" in out


@pytest.mark.parametrize("name", _subcommands())
def test_subcommand_help(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    assert f"usage: zerounlearn {name}" in capsys.readouterr().out
