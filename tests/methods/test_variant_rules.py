"""The opt-in variants' rules (``methods/zerounlearn_gd/variants.py``, ``init-hparams --many / --deep / --retain``):
applied to SmolLM2's paper YAML they give SmolLM2's shipped, measured opt-in files; on other depths they follow the
stated rule."""
from __future__ import annotations

import pytest

from tiny_models import REPO_ROOT
from zerounlearn_editor.engine.hparams import load_config_file
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams, deep_mode_settings
from zerounlearn_editor.methods.zerounlearn_gd.variants import (
    RETAIN_MANY,
    VARIANTS,
    check_variants,
    many_layers,
    many_mode_settings,
    retain_mode_settings,
    variant_settings,
)

GD = REPO_ROOT / "hparams" / "ZeroUnlearn-GD"
SMOLLM2_LAYERS = 30
MEASURED_KEYS = {"many": set(), "deep": set(), "retain": set(), RETAIN_MANY: set(), "robust": set()}
"""Keys of SmolLM2's shipped opt-in files that depend on a measurement the rule cannot know: none. (The -retain file
omits fluency_max_increase, whose default is the paper file's 1.0, so the loaded settings agree.)"""


@pytest.mark.parametrize("variant", [*VARIANTS, RETAIN_MANY])
def test_the_rule_on_smollm2s_paper_yaml_gives_its_shipped_opt_in_file(variant):
    paper = load_config_file(GD / "SmolLM2-135M-Instruct.yaml")
    derived = ZeroUnlearnGDHyperParams.from_dict({**paper, **variant_settings(variant, paper, SMOLLM2_LAYERS)},
                                                 source=f"rule {variant}").to_dict()
    shipped = ZeroUnlearnGDHyperParams.from_hparams(GD / f"SmolLM2-135M-Instruct-{variant}.yaml").to_dict()
    differing = {k for k in shipped if derived[k] != shipped[k]}
    assert differing == MEASURED_KEYS[variant], differing
    base = ZeroUnlearnGDHyperParams.from_dict(paper, source="paper").to_dict()
    changed = {k for k in base if base[k] != shipped[k]}  # the shipped file is not the paper's
    assert changed and changed <= set(variant_settings(variant, paper, SMOLLM2_LAYERS)), changed


@pytest.mark.parametrize("layers, depth, expected", [
    ([16, 17, 18], 30, list(range(12, 19))),  # SmolLM2: 7 of 30
    ([16, 17, 18], 28, list(range(12, 19))),  # Llama-3.2-3B: round(6.53) = 7
    ([19, 20, 21], 32, list(range(15, 22))),  # Llama-3.1-8B: round(7.47) = 7
    ([9, 10, 11], 36, list(range(4, 12))),  # Qwen3-4B: round(8.4) = 8
    ([15, 16, 17], 48, list(range(7, 18))),  # gpt2-xl: round(11.2) = 11
    ([3, 4, 5], 18, [2, 3, 4, 5]),  # Gemma-3-270m: round(4.2) = 4
    ([1, 2], 30, [0, 1, 2]),  # clipped at layer 0
    ([4, 5, 6], 6, [4, 5, 6]),  # never fewer than the paper's layers
    ([2, 6], 30, [0, 1, 2, 3, 4, 5, 6]),  # a gap: the span from the last layer, with the given ones
])
def test_many_layers_widen_downward_to_a_share_of_the_depth(layers, depth, expected):
    assert many_layers(layers, depth) == expected


def test_many_norm_weight_is_the_papers_times_three_tenths_and_the_mappings_are_fresh():
    assert many_mode_settings([16, 17, 18], 30, 1000.0)["norm_weight"] == 300.0
    assert many_mode_settings([16, 17, 18], 28, 0.1)["norm_weight"] == 0.03  # not 0.030000000000000006
    first = many_mode_settings([1], 30, 1.0)
    first["layers"].append(99)
    assert 99 not in many_mode_settings([1], 30, 1.0)["layers"]
    assert variant_settings("deep", {}, 30) == deep_mode_settings()
    assert variant_settings("retain", {}, 30) == retain_mode_settings() == {"retain_file": None,
                                                                            "retain_nullspace_weight": 0.1}
    with pytest.raises(ValueError, match="unknown variant 'wide'"):
        variant_settings("wide", {}, 30)
    with pytest.raises(ValueError, match="needs the paper's edited layers"):
        many_layers([], 30)


@pytest.mark.parametrize("pair", [("many", "deep"), ("deep", "retain"), ("many", "robust"), ("deep", "robust"),
                                  ("retain", "robust")])
def test_two_variants_together_are_refused_naming_both(pair):
    with pytest.raises(ValueError, match=rf"--{pair[0]} and --{pair[1]} together are refused: "):
        check_variants(list(pair), "ZeroUnlearn-GD")
    with pytest.raises(ValueError, match="--many and --deep together are refused"):
        check_variants(["many", "retain", "deep"], "ZeroUnlearn-GD")
    with pytest.raises(ValueError, match="--many and --robust together are refused: --robust already holds"):
        check_variants(["many", "retain", "robust"], "ZeroUnlearn-GD")


def test_many_and_retain_together_are_the_retain_many_rule():
    assert check_variants(["retain", "many"], "ZeroUnlearn-GD") == RETAIN_MANY
    assert [check_variants(v, "ZeroUnlearn-GD") for v in ([], ["many"], ["retain"])] == [None, "many", "retain"]
    # Gemma-3-270m's measured rule settings (18 layers, edited 3-5, norm_weight 504 at 2-5): 4 layers, 504 x 3/10
    settings = variant_settings(RETAIN_MANY, {"layers": [3, 4, 5], "norm_weight": 504.0}, 18)
    assert settings == {"layers": [2, 3, 4, 5], "target_objective": "suppress_answer", "v_early_stop_loss": 0.003,
                        "norm_weight": 151.2, "retain_file": None, "retain_nullspace_weight": 0.1,
                        "context_nullspace_weight": 0.1}
    assert "orthogonality_weight" not in settings  # kept as the paper's, unlike --many's 0


def test_variants_are_zerounlearn_gd_modes():
    check_variants(["many"], "ZeroUnlearn-GD")
    check_variants([], "ZeroUnlearn")
    with pytest.raises(ValueError, match="--retain is a ZeroUnlearn-GD mode; --method is ZeroUnlearn"):
        check_variants(["retain"], "ZeroUnlearn")
