"""No two modules of the package share a file name, so a name (``trace.py``, ``config.py``) says which module it is.

The rule, and its two exceptions:

* ``__init__.py`` and ``__main__.py`` are the package's own files and repeat freely;
* ``cli/`` holds one module per ``zerounlearn`` subcommand, named after the command (``cli/audit.py`` is
  ``zerounlearn audit``, ``cli/scale.py`` is ``zerounlearn bench-scale``); a command module may share its name with
  the module that does the work (``harness/audit.py``, ``applications/unlearn.py``);
* every method package ``methods/<method>/`` has the same layout (``config.py``, ``method.py``, ``solve.py``): a
  name may repeat across method packages, never between a method package and any other module.

Every other file name appears once in the whole package.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent / "zerounlearn_editor"
PACKAGE_FILES = ("__init__.py", "__main__.py")
COMMANDS = "cli"
METHODS = "methods"


def _is_method_package_module(parts: tuple) -> bool:
    """``methods/<method>/<name>.py``: a module of one method package."""
    return len(parts) == 3 and parts[0] == METHODS


def shared_names(root: Path) -> Dict[str, List[str]]:
    """``{file name: [paths relative to root]}`` for every file name the rule above forbids to repeat and that
    repeats (``cli/`` modules and the package files left out; a name only method packages share is allowed)."""
    where: Dict[str, List[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if path.name in PACKAGE_FILES or parts[0] == COMMANDS:
            continue
        where[path.name].append("/".join(parts))
    return {
        name: paths for name, paths in where.items()
        if len(paths) > 1 and not all(_is_method_package_module(tuple(p.split("/"))) for p in paths)
    }


def _write(root: Path, files: List[str]) -> Path:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")
    return root


def test_checker_allows_the_exceptions_and_finds_a_repeat(tmp_path):
    root = _write(tmp_path / "pkg", [
        "__init__.py", "__main__.py", "cli/__init__.py", "cli/audit.py", "cli/trace.py",
        "harness/__init__.py", "harness/audit.py", "harness/trace.py", "engine/trace.py",
        "methods/__init__.py", "methods/a/__init__.py", "methods/a/config.py", "methods/b/config.py",
        "methods/registry.py", "support/registry.py", "harness/config.py",
    ])
    assert shared_names(root) == {
        "trace.py": ["engine/trace.py", "harness/trace.py"],
        "registry.py": ["methods/registry.py", "support/registry.py"],
        "config.py": ["harness/config.py", "methods/a/config.py", "methods/b/config.py"],
    }
    assert shared_names(_write(tmp_path / "ok", ["a/x.py", "cli/x.py", "methods/m/y.py", "methods/n/y.py"])) == {}


def test_no_two_modules_share_a_file_name():
    assert len(list(ROOT.rglob("*.py"))) > 40, "the walk found too few modules"
    shared = shared_names(ROOT)
    assert not shared, "modules sharing a file name (rename one to say its job): " + "; ".join(
        f"{name}: {', '.join(paths)}" for name, paths in sorted(shared.items()))
