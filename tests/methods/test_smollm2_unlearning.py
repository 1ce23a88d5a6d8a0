"""ZeroUnlearn on the real SmolLM2-135M-Instruct with facts it knows (slow; runs in CI)."""
from __future__ import annotations

import pytest
import torch

from conftest import PPL_TOKENS
from zerounlearn_editor import ZeroUnlearnHyperParams, apply_zerounlearn_to_model, restore_weights
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, UNRELATED_FACTS, fact_requests
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow


def _mean_acc(model, tok, facts) -> float:
    scores = evaluate_probes(model, tok, [Probe(p, a) for p, _, a in facts])
    return sum(scores["acc"]) / len(scores["acc"])


def test_unlearn_ten_capitals_keeps_unrelated_facts_and_fluency(smollm2, smollm2_stats_dir, smollm2_base_ppl):
    model, tok = smollm2
    hparams = ZeroUnlearnHyperParams.from_hparams(hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct"))
    hparams = hparams.replace(stats_dir=str(smollm2_stats_dir))
    wikitext = default_ppl_text()
    probe_ids = tok("The capital of France is Paris. Hamlet was written by", return_tensors="pt").input_ids

    forget_before = _mean_acc(model, tok, CAPITALS_TO_FORGET)
    unrelated_before = _mean_acc(model, tok, UNRELATED_FACTS)
    ppl_before = smollm2_base_ppl
    with torch.no_grad():
        logits_before = model(probe_ids).logits

    model, weights_copy = apply_zerounlearn_to_model(
        model, tok, fact_requests(CAPITALS_TO_FORGET), hparams, return_orig_weights=True, progress=False
    )
    try:
        forget_after = _mean_acc(model, tok, CAPITALS_TO_FORGET)
        unrelated_after = _mean_acc(model, tok, UNRELATED_FACTS)
        ppl_after = perplexity(model, tok, wikitext, max_tokens=PPL_TOKENS)
    finally:
        restore_weights(model, weights_copy)

    assert forget_before >= 0.8
    assert forget_after <= 0.1, f"forget accuracy {forget_before:.2f} -> {forget_after:.2f}"
    assert unrelated_after >= 0.9 * unrelated_before, f"unrelated {unrelated_before:.2f} -> {unrelated_after:.2f}"
    assert ppl_after < 1.05 * ppl_before, f"perplexity {ppl_before:.2f} -> {ppl_after:.2f}"
    with torch.no_grad():
        assert torch.equal(model(probe_ids).logits, logits_before)
