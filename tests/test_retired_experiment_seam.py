"""Issue 47: the lifelong protection experiment (``forgotten_protection_weight``, its forgotten-facts state and
the ``ZeroUnlearn-GD+P`` bench row) left the package for the branch experiment/forgotten-protection. Only the
retired-keys seam (:mod:`zerounlearn_editor.engine.retired_keys`) may still name it: there a YAML that sets the key
is refused, and an old folder's state file is named so that the ledger ignores it."""
from __future__ import annotations

import re

from tiny_models import REPO_ROOT

PACKAGE = REPO_ROOT / "zerounlearn_editor"
SEAM = PACKAGE / "engine" / "retired_keys.py"
TRACES = re.compile(r"forgotten[_ -]?(protection|state)|ForgottenState|S_prev|tracks_forgotten|GD\+P|-lifelong",
                    re.IGNORECASE)


def test_only_the_retired_keys_seam_names_the_protection_experiment():
    found = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".yaml", ".yml", ".json", ".md", ".txt") or path == SEAM:
            continue
        hits = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if TRACES.search(line)]
        if hits:
            found[str(path.relative_to(REPO_ROOT))] = hits
    assert not found, found
    assert "forgotten_protection_weight" in SEAM.read_text(encoding="utf-8")  # the seam itself refuses the key


def test_no_shipped_or_benchmark_yaml_sets_the_protection():
    yamls = sorted((REPO_ROOT / "hparams").rglob("*.yaml")) + sorted((REPO_ROOT / "benchmarks").rglob("*.yaml"))
    assert yamls
    setting = [str(p.relative_to(REPO_ROOT)) for p in yamls if "forgotten_protection" in p.read_text(encoding="utf-8")]
    assert not setting, setting
