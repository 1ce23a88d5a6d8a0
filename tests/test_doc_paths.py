"""No committed doc, command or script names a path of one machine.

Commands in the docs (README, CONTRIBUTING, ``benchmarks/``), the CI scripts, the shipped YAMLs and the code must
run from any checkout: they name files relative to the checkout (``../shared/data``, ``../shared/vendor/...``),
through a variable (``$EASYEDIT_PATH``, ``$VENV_PY``) or under ``~`` where the package's cache default is meant
(``~/.cache/zerounlearn_editor``), never as an absolute path of the machine they were written on (a home folder,
a scratch folder, a working tree).

What is scanned: the committed text files (``git ls-files``; without git, the same folders walked) that are docs,
commands, configuration or code: :data:`SCANNED_SUFFIXES` anywhere, plus every file under ``.ci/``. Left out:
the measured outputs under ``benchmarks/results/`` (JSON, tables and plots written by the runs; they record the
arguments a run was given, so rewriting them would falsify the record) except their ``README.md``, whose
commands are checked like any other.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

REPO_ROOT = Path(__file__).resolve().parent.parent

SCANNED_SUFFIXES = (".md", ".py", ".yaml", ".yml", ".sh", ".toml", ".cfg", ".txt", ".in", ".json")
"""Text files read wherever they are committed (``.json`` for the fixtures and configs outside the results)."""

ALWAYS_SCANNED = (".ci/",)
"""Folders whose every file is read, whatever its name (``.ci/run`` has no suffix)."""

RESULTS = "benchmarks/results/"
"""Measured outputs: left out, except each folder's ``README.md``."""

_ROOTS = ("root", "home", "work", "tmp", "Users")
MACHINE_PATH = re.compile(
    r"(?<![\w.~$/-])/(?:" + "|".join(_ROOTS) + r")/"  # one of _ROOTS right under the file system's root
    r"|(?<![\w])[A-Za-z]:\\[\w .-]+\\"  # a Windows drive letter, colon, backslash and a folder (not "C:\n" in code)
)
"""An absolute path of one machine: a POSIX home, scratch or working folder, or a Windows drive. A relative path
that happens to contain such a folder (``../tmp/x``, ``results/work/``) does not match."""

ALLOWED: Dict[Tuple[str, str], str] = {}
"""``(file, matched text)`` -> why that file may name it. Only code that must name such a path (a test of a path
check, an example of bad input) belongs here, with the reason; none does today (this test builds its examples
from pieces, so it does not name one either)."""


def committed_files(root: Path) -> List[str]:
    """The repository's committed files, relative and in POSIX form (``git ls-files``; without git, every file under
    ``root`` outside ``.git`` and build or cache folders)."""
    if shutil.which("git") and (root / ".git").exists():
        result = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
        if result.returncode == 0:
            return sorted(p for p in result.stdout.decode("utf-8").split("\0") if p)
    skip = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist", ".venv", ".venv-easyedit"}
    return sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*")
        if p.is_file() and not skip.intersection(p.relative_to(root).parts) and not p.name.endswith(".egg-info")
    )


def scanned(files: Iterable[str]) -> List[str]:
    """The files of ``files`` this test reads (see the module docstring)."""
    chosen = []
    for rel in files:
        if rel.startswith(RESULTS) and Path(rel).name != "README.md":
            continue
        if rel.startswith(ALWAYS_SCANNED) or rel.endswith(SCANNED_SUFFIXES):
            chosen.append(rel)
    return chosen


def machine_paths(text: str) -> List[Tuple[int, str]]:
    """``(line number, matched text)`` of every machine-specific path in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found.extend((number, m.group(0)) for m in MACHINE_PATH.finditer(line))
    return found


def offending(root: Path, files: Iterable[str]) -> List[str]:
    """``"<file>:<line>: <match>"`` for every machine path in ``files`` (under ``root``) not in :data:`ALLOWED`."""
    hits = []
    for rel in files:
        path = root / rel
        if not path.is_file():  # listed by git but deleted in the working tree
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text
        hits.extend(f"{rel}:{number}: {match}" for number, match in machine_paths(text)
                    if (rel, match) not in ALLOWED)
    return hits


def _machine(root: str) -> str:
    """``/<root>/`` built from pieces, so that this file names no machine path itself."""
    return "/" + root + "/"


def test_the_pattern_finds_machine_paths_and_not_relative_ones():
    bad = [f"VENV_PY={_machine('root')}.cache/x/bin/python", f"--out {_machine('tmp')}bench_smoke",
           f"EASYEDIT_PATH={_machine('work')}vendor", f"cd {_machine('home')}me/src", f"`{_machine('Users')}me/x`",
           "model " + "C" + ":\\models\\gpt2", f'("{_machine("tmp")}a.json")']
    good = ["../shared/vendor/EasyEdit-14cea82", "~/.cache/zerounlearn_editor", "$EASYEDIT_PATH/easyeditor",
            "results/work/a", "../tmp/x", "https://example.org/home/page", ".venv-easyedit/bin/python",
            "a ratio 3:1, key 1:\\n", "class " + "C" + ":\\n    def f(self):"]
    assert [len(machine_paths(line)) for line in bad] == [1] * len(bad)
    assert [machine_paths(line) for line in good] == [[]] * len(good)


def test_scanned_files_are_docs_commands_and_code_but_not_measured_outputs():
    files = ["README.md", "CONTRIBUTING.md", ".ci/run", "benchmarks/RESULTS.md", "benchmarks/speed.py",
             "benchmarks/scale/variants/a0.yaml", "benchmarks/results/audit/README.md",
             "benchmarks/results/audit/x/audit.md", "benchmarks/results/speed/a.json", "hparams/GA/gpt2-xl.yaml",
             "zerounlearn_editor/cli/__init__.py", "tests/test_x.py", "benchmarks/results/scale/plot.png"]
    assert scanned(files) == ["README.md", "CONTRIBUTING.md", ".ci/run", "benchmarks/RESULTS.md",
                              "benchmarks/speed.py", "benchmarks/scale/variants/a0.yaml",
                              "benchmarks/results/audit/README.md", "hparams/GA/gpt2-xl.yaml",
                              "zerounlearn_editor/cli/__init__.py", "tests/test_x.py"]


def test_offending_reports_file_line_and_path(tmp_path):
    (tmp_path / "doc.md").write_text(f"ok ../shared/data\nrun --out {_machine('tmp')}x\n", encoding="utf-8")
    (tmp_path / "bin.md").write_bytes(b"\xff\xfe" + _machine("tmp").encode("utf-16-le"))
    assert offending(tmp_path, ["doc.md", "bin.md", "missing.md"]) == [f"doc.md:2: {_machine('tmp')}"]


def test_no_committed_doc_command_or_code_names_a_machine_path():
    files = scanned(committed_files(REPO_ROOT))
    assert "README.md" in files and "CONTRIBUTING.md" in files and "benchmarks/RESULTS.md" in files
    hits = offending(REPO_ROOT, files)
    assert not hits, (
        "absolute paths of one machine in committed files (write them relative to the checkout, e.g. "
        "../shared/vendor/EasyEdit-14cea82, through a variable such as $EASYEDIT_PATH, or under ~ for the "
        "package's cache):\n" + "\n".join(hits)
    )


def test_every_allowed_entry_is_still_needed():
    """An allow-list entry whose file no longer names its path is removed (the list stays narrow)."""
    for (rel, match), reason in ALLOWED.items():
        assert reason.strip(), f"{rel}: {match}: the allow-list needs the reason"
        assert match in (REPO_ROOT / rel).read_text(encoding="utf-8"), f"{rel}: {match} is gone; remove it"
