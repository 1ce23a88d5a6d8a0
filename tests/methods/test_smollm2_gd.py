"""ZeroUnlearn-GD (exact solver) on 50 CounterFact facts SmolLM2-135M-Instruct knows (slow; in CI).

The 50 facts are the ``case_ids`` of ``tests/fixtures/smollm2_known_counterfact_50.json``: the first 50 records of
``counterfact-easyedit`` whose forget prompts SmolLM2 answers with token accuracy 1.0
(:func:`~zerounlearn_editor.evaluation.select_known_cases`, which scans 1,253 records to find them; written by this
file's ``__main__``). The test scores them again before the edit (efficacy 1.0 asserted), so a model that no longer
knows one of them fails here rather than passing on a stale list.
"""
from __future__ import annotations

import json
from statistics import mean

import pytest

from conftest import PPL_TOKENS
from tiny_models import FIXTURES
from zerounlearn_editor import ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model, restore_weights
from zerounlearn_editor.data import load_cases
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.evaluation import evaluate_probes, perplexity, select_known_cases
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow

KNOWN_50 = FIXTURES / "smollm2_known_counterfact_50.json"


def test_gd_exact_forgets_fifty_counterfact_facts(smollm2, smollm2_stats_dir, smollm2_base_ppl):
    model, tok = smollm2
    hparams = ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct"))
    hparams = hparams.replace(stats_dir=str(smollm2_stats_dir))
    assert hparams.solver == "exact"
    # Facts the model knows: token accuracy 1.0 on the forget prompt. SmolLM2 knows 80 of the 1919
    # EasyEdit-format records (47 of the 1129 ROME-format ones). A looser threshold admits answers
    # like " Hon|da" where only the completion "da" is right; those keep accuracy 0.5 after any edit.
    known = set(json.loads(KNOWN_50.read_text(encoding="utf-8"))["case_ids"])
    cases = [c for c in load_cases("counterfact-easyedit") if c.case_id in known]
    assert len(cases) == 50
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


if __name__ == "__main__":  # rewrite KNOWN_50: python tests/methods/test_smollm2_gd.py
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer, prepare_smollm2

    _model, _tok = load_model_and_tokenizer(str(prepare_smollm2()))
    _cases = load_cases("counterfact-easyedit")
    _chosen = select_known_cases(_model, _tok, _cases, 50, min_accuracy=1.0)
    _scanned = next(i for i, c in enumerate(_cases) if c is _chosen[-1]) + 1
    KNOWN_50.write_text(json.dumps({"dataset": "counterfact-easyedit", "scanned": _scanned, "min_accuracy": 1.0,
                                    "model": "SmolLM2-135M-Instruct", "case_ids": [c.case_id for c in _chosen]},
                                   indent=1) + "\n", encoding="utf-8")
    print(f"wrote {KNOWN_50}: {len(_chosen)} case_ids of the first {_scanned} records")
