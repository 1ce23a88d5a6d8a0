"""The derived ``hparams/ZeroUnlearn-GD/<model>-many.yaml`` and ``-robust.yaml`` files (every model with a paper YAML
but SmolLM2, whose files are measured) are what ``init-hparams --many`` / ``--robust`` write from the model's config.

A pin: regenerate on purpose only (a change of a rule, of init-hparams' output or of a paper YAML), from the
repository root: ``OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/many/make_many_yamls.py [--variant robust]``
(then the YAML pins of the changed files: ``python tests/methods/test_yaml_pins.py ZeroUnlearn-GD/<model>-many``,
``... <model>-robust``).
"""
from __future__ import annotations

import sys

import pytest

from tiny_models import REPO_ROOT
from zerounlearn_editor.cli.init_hparams import is_variant_yaml
from zerounlearn_editor.engine.hparams import load_config_file
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.variants import many_mode_settings, robust_settings

GD = REPO_ROOT / "hparams" / "ZeroUnlearn-GD"
sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "many"))
try:
    from make_many_yamls import CONFIGS, VARIANTS, many_yaml
finally:
    sys.path.pop(0)
DERIVED = sorted(CONFIGS)


RULES = {"many": many_mode_settings, "robust": robust_settings}


def test_every_paper_yaml_has_a_many_and_a_robust_yaml():
    papers = {p.stem for p in GD.glob("*.yaml") if not is_variant_yaml(p)}
    assert papers == set(DERIVED) | {"SmolLM2-135M-Instruct"}
    assert all((GD / f"{p}-{variant}.yaml").is_file() for p in papers for variant in VARIANTS)
    assert set(RULES) == set(VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model", DERIVED)
def test_the_shipped_yaml_is_what_init_hparams_writes(model, variant, tmp_path):
    written = many_yaml(model, tmp_path / f"{model}-{variant}.yaml", variant).read_text(encoding="utf-8")
    assert (GD / f"{model}-{variant}.yaml").read_text(encoding="utf-8") == written


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model", DERIVED)
def test_a_derived_yaml_says_so_and_is_its_paper_yaml_with_the_rule(model, variant):
    path = GD / f"{model}-{variant}.yaml"
    header = path.read_text(encoding="utf-8").splitlines()[:3]
    assert header[0].startswith(f"# Written by `zerounlearn init-hparams` from the shipped ZeroUnlearn-GD/{model}.yaml")
    assert f"derived by init-hparams --{variant} from the model's config; not measured on real weights" in header[2]
    paper = load_config_file(GD / f"{model}.yaml")
    rule = RULES[variant](paper["layers"], int(paper["v_loss_layer"]) + 1, paper["norm_weight"])
    expected = ZeroUnlearnGDHyperParams.from_dict({**paper, **rule}, source=model).to_dict()
    assert ZeroUnlearnGDHyperParams.from_hparams(path).to_dict() == expected
