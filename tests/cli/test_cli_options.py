"""Every ``zerounlearn`` subcommand keeps accepting exactly the flags it accepted, with the same defaults.

``tests/fixtures/cli_options.json`` holds, per subcommand and argument, what parsing depends on: the option
strings, dest, default, ``required``, ``choices``, ``nargs``, ``const``, ``metavar``, the action kind and what
its ``type`` makes of a few inputs (help text is not pinned). It was written from the parser as it was before
``cli/`` was split into one module per subcommand with shared parent parsers, so a shared parent that adds a flag
to a subcommand that did not take it, or changes a default, fails here.

Regenerate on purpose only: ``OMP_NUM_THREADS=1 PYTHONPATH=. python tests/cli/test_cli_options.py``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import FIXTURES, REPO_ROOT  # noqa: E402
from zerounlearn_editor.cli import build_parser  # noqa: E402

PIN = FIXTURES / "cli_options.json"
TYPE_PROBES = ("-1", "0", "1", "2.5", "1,3", "x")
SHARED = ("--device", "--hparams", "--out", "--model", "--data", "--data-path", "--no-progress", "--dtype",
          "--method-hparams", "--seed", "--seeds", "--methods", "--ppl-tokens", "--ppl-text", "--corpus",
          "--stats-dir", "--data-dir", "--batch-size", "--known-only", "--known-min-accuracy")


def _type_behaviour(kind: Any) -> Any:
    """What an argparse ``type`` makes of :data:`TYPE_PROBES` (``"error"`` where it refuses), or None."""
    if kind is None:
        return None
    out = {}
    for text in TYPE_PROBES:
        try:
            value = kind(text)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            value = "error"
        out[text] = value if isinstance(value, (int, float, str)) else repr(value)
    return out


def _jsonable(value: Any) -> Any:
    return (
        value
        if isinstance(value, (type(None), bool, int, float, str))
        else repr(list(value) if isinstance(value, tuple) else value)
    )


def option_table() -> Dict[str, Dict[str, Any]]:
    """``{subcommand: {dest: settings}}`` of :func:`build_parser` (``<top>`` for the global flags)."""
    parser = build_parser()
    table: Dict[str, Dict[str, Any]] = {"<top>": {}}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public accessor
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                table[name] = {a.dest: _settings(a) for a in sub._actions}  # noqa: SLF001
                table[name]["<defaults>"] = sorted(k for k in sub._defaults)  # noqa: SLF001
        else:
            table["<top>"][action.dest] = _settings(action)
    return table


def _settings(action: argparse.Action) -> Dict[str, Any]:
    return {
        "options": list(action.option_strings), "default": _jsonable(action.default), "required": action.required,
        "choices": None if action.choices is None else list(action.choices), "nargs": action.nargs,
        "const": _jsonable(action.const), "metavar": action.metavar, "action": type(action).__name__,
        "type": _type_behaviour(action.type),
    }


def test_every_subcommand_takes_the_pinned_flags_with_the_pinned_defaults():
    pinned = json.loads(PIN.read_text())
    now = json.loads(json.dumps(option_table()))
    assert sorted(now) == sorted(pinned)
    for name in pinned:
        assert sorted(now[name]) == sorted(pinned[name]), name
        for dest in pinned[name]:
            assert now[name][dest] == pinned[name][dest], (name, dest)


def test_shared_flags_are_declared_once_in_the_parent_parsers():
    """``--device`` etc. are declared in ``cli/common.py`` only, with ``add_argument`` or its parent-parser
    factory ``_shared`` (``bench-speed --n`` is a comma list, not a count)."""
    cli = REPO_ROOT / "zerounlearn_editor" / "cli"
    for flag in SHARED:
        where = [f"{p.name}:{i}" for p in sorted(cli.glob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(rf'(add_argument|_shared)\("{flag}"', line)]
        assert where and all(w.startswith("common.py:") for w in where) and len(where) == 1, (flag, where)


if __name__ == "__main__":
    table = option_table()
    lines = ["{"]
    for i, name in enumerate(sorted(table)):
        lines.append(f" {json.dumps(name)}: {{")
        rows = [
            f"  {json.dumps(dest)}: {json.dumps(table[name][dest], sort_keys=True)}" for dest in sorted(table[name])
        ]
        lines.append(",\n".join(rows))
        lines.append(" }" + ("," if i < len(table) - 1 else ""))
    PIN.write_text("\n".join(lines + ["}"]) + "\n")
    print(f"wrote {PIN}")
