"""The shipped ``SmolLM2-135M-Instruct-robust.yaml`` on SmolLM2 (slow; in CI): the demo's five capitals, with the
demo's retain set of other capitals.

It forgets the five, keeps the sibling capitals the demo prints as untouched, and a 4-bit copy of the edited model
(RTN in groups of 16, which keeps all five on the unedited model; per-channel int4 already loses four of them there)
does not answer them either. Each of the graduated keys is checked to be set, so the test measures the shipped file.
"""
from __future__ import annotations

from statistics import mean

import pytest

from zerounlearn_editor import ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model, restore_weights
from zerounlearn_editor.cli.demo import FORGET_FACTS, KEEP_FACTS, RETAIN_FACTS
from zerounlearn_editor.data.facts import OTHER_CAPITALS, fact_requests
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation import evaluate_probes
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES, quantized_copy
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow

SIBLINGS = OTHER_CAPITALS[:3]


def _acc(model, tok, facts):
    return evaluate_probes(model, tok, [Probe(p, a) for p, _, a in facts])["acc"]


def test_robust_yaml_forgets_keeps_siblings_and_4_bit_rounding_does_not_bring_answers_back(smollm2, smollm2_stats_dir):
    model, tok = smollm2
    hp = ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct-robust"))
    hp = hp.replace(stats_dir=str(smollm2_stats_dir))
    assert hp.rank_below_alternatives == {"weight": 1.0, "margin": 8.0, "k": 3}
    assert hp.quantized_forget_keys == {"scheme": "int4", "weight": 1.0}
    assert hp.retain_nullspace_weight > 0 and not hp.experimental
    assert _acc(model, tok, FORGET_FACTS) == [1.0] * 5
    unedited_4bit = quantized_copy(model, QUANT_SCHEMES["int4g16"])
    assert _acc(unedited_4bit, tok, FORGET_FACTS) == [1.0] * 5  # the rounded model knows them: the check can fail
    del unedited_4bit
    retain = [{"prompt": p, "subject": s} for p, s, _ in RETAIN_FACTS]
    model, orig = apply_zerounlearn_gd_to_model(model, tok, fact_requests(FORGET_FACTS), hp, retain=retain,
                                                return_orig_weights=True, progress=False)
    try:
        forget, siblings = _acc(model, tok, FORGET_FACTS), _acc(model, tok, SIBLINGS)
        kept = _acc(model, tok, KEEP_FACTS)
        rounded = quantized_copy(model, QUANT_SCHEMES["int4g16"])
        forget_4bit = _acc(rounded, tok, FORGET_FACTS)
        del rounded
    finally:
        restore_weights(model, orig)
    assert mean(forget) <= 0.2, forget
    assert mean(forget_4bit) <= 0.2, forget_4bit
    assert siblings == [1.0] * 3, siblings
    assert mean(kept) >= 0.9, kept
