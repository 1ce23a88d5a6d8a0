"""Every shipped -retain.yaml is its paper YAML plus retain-aware keys, and the paper YAMLs keep them at 0."""
from __future__ import annotations

from pathlib import Path

import pytest

from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams

ROOT = Path(__file__).resolve().parent.parent / "hparams"
CLASSES = {"ZeroUnlearn": ZeroUnlearnHyperParams, "ZeroUnlearn-GD": ZeroUnlearnGDHyperParams}
RETAIN_KEYS = {"retain_file", "retain_weight", "projection_retain_weight", "projection_utility_weight", "retain_nullspace_weight"}
PAIRS = [(m, p) for m in CLASSES for p in sorted((ROOT / m).glob("*.yaml")) if not p.stem.endswith("-retain")]


def test_every_model_has_a_retain_yaml():
    assert len(PAIRS) >= 10
    for method, paper in PAIRS:
        assert paper.with_name(f"{paper.stem}-retain.yaml").is_file(), paper


@pytest.mark.parametrize("method, paper", PAIRS, ids=[f"{m}/{p.stem}" for m, p in PAIRS])
def test_retain_yaml_differs_only_in_retain_keys(method, paper):
    cls = CLASSES[method]
    base = cls.from_hparams(paper)
    retain = cls.from_hparams(paper.with_name(f"{paper.stem}-retain.yaml"))
    assert all(v == 0 for v in base.retain_weights().values()) and base.retain_file is None
    assert any(v > 0 for v in retain.retain_weights().values())
    differing = {k for k, v in base.to_dict().items() if retain.to_dict()[k] != v}
    assert differing and differing <= RETAIN_KEYS
