"""The LoRA adapter of a real SmolLM2 edit reproduces it (slow; runs in CI)."""
from __future__ import annotations

import copy

import pytest
import torch

from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
    export_lora_adapter,
    restore_weights,
)
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, fact_requests
from zerounlearn_editor.engine.pipeline import neutral_targets
from zerounlearn_editor.support.resources import hparams_path, shared_file

pytestmark = pytest.mark.slow
peft = pytest.importorskip("peft")


def test_smollm2_adapters_reproduce_both_methods(smollm2, smollm2_stats_dir, tmp_path):
    from peft import PeftModel

    model, tok = smollm2
    requests = fact_requests(CAPITALS_TO_FORGET[:3])
    n = len(requests)
    changes = dict(stats_dir=str(smollm2_stats_dir), mom2_dataset=str(shared_file("text/wiki_passages_3643.jsonl")))
    methods = [
        (
            ZeroUnlearnHyperParams.from_hparams(hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct")).replace(
                **changes
            ),
            apply_zerounlearn_to_model,
            2 * n,
        ),
        (
            ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct")).replace(
                **changes
            ),
            apply_zerounlearn_gd_to_model,
            n,
        ),
    ]
    ids = tok(["The capital of France is Paris. Hamlet was written by", "The capital of Japan is"],
              return_tensors="pt", padding=True)
    with torch.no_grad():
        logits_base = model(**ids).logits
    targets = neutral_targets(model, tok, requests, methods[0][0])  # same target settings for both YAMLs
    for hparams, apply, bound in methods:
        model, weights_copy = apply(
            model, tok, requests, hparams, return_orig_weights=True, targets=targets, progress=False
        )
        try:
            with torch.no_grad():
                logits_edit = model(**ids).logits
            report = export_lora_adapter(weights_copy, model, tmp_path / hparams.alg_name, max_rank=bound)
        finally:
            restore_weights(model, weights_copy)
        assert all(layer.numerical_rank <= bound and layer.relative_residual < 1e-5 for layer in report.layers), (
            report.layers
        )
        assert float((logits_edit - logits_base).norm() / logits_base.norm()) > 1e-3
        adapted = PeftModel.from_pretrained(copy.deepcopy(model), str(tmp_path / hparams.alg_name)).eval()
        with torch.no_grad():
            relative = float((adapted(**ids).logits - logits_edit).norm() / logits_edit.norm())
            assert relative < 1e-4, f"{hparams.alg_name}: adapter logits differ by {relative:.2e}"
            with adapted.disable_adapter():
                assert float((adapted(**ids).logits - logits_base).norm() / logits_base.norm()) < 1e-6
        del adapted
