"""ZeroUnlearn-GD (exact solver) on 50 CounterFact facts SmolLM2-135M-Instruct knows (slow; in CI)."""
from __future__ import annotations

from statistics import mean

import pytest

from conftest import PPL_TOKENS
from zerounlearn_editor import ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model, restore_weights
from zerounlearn_editor.data import load_cases
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.evaluation import evaluate_probes, perplexity, select_known_cases
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow


def test_gd_exact_forgets_fifty_counterfact_facts(smollm2, smollm2_stats_dir, smollm2_base_ppl):
    model, tok = smollm2
    hparams = ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct"))
    hparams = hparams.replace(stats_dir=str(smollm2_stats_dir))
    assert hparams.solver == "exact"
    # Facts the model knows: token accuracy 1.0 on the forget prompt. SmolLM2 knows 80 of the 1919
    # EasyEdit-format records (47 of the 1129 ROME-format ones). A looser threshold admits answers
    # like " Hon|da" where only the completion "da" is right; those keep accuracy 0.5 after any edit.
    cases = select_known_cases(model, tok, load_cases("counterfact-easyedit"), 50, min_accuracy=1.0)
    probes = [p for case in cases for p in case.forget]
    wikitext = default_ppl_text()

    efficacy_before = mean(evaluate_probes(model, tok, probes)["acc"])
    ppl_before = smollm2_base_ppl
    model, weights_copy = apply_zerounlearn_gd_to_model(
        model, tok, [c.request for c in cases], hparams, return_orig_weights=True, progress=False
    )
    try:
        efficacy_after = mean(evaluate_probes(model, tok, probes)["acc"])
        ppl_after = perplexity(model, tok, wikitext, max_tokens=PPL_TOKENS)
    finally:
        restore_weights(model, weights_copy)

    assert efficacy_before == 1.0
    assert efficacy_after < 0.1 * efficacy_before, f"efficacy {efficacy_before:.2f} -> {efficacy_after:.2f}"
    assert ppl_after < 1.10 * ppl_before, f"perplexity {ppl_before:.2f} -> {ppl_after:.2f}"
