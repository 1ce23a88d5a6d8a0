"""PEFT LoRA export of an edit: rank bounds, PEFT reproduces the edited logits, switch-off, merge."""
from __future__ import annotations

import copy
import json
import logging

import pytest
import torch

from tiny_models import forget_requests, tiny_gpt2, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import (
    NotLowRankError,
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
    export_lora_adapter,
)
from zerounlearn_editor.integrations.adapters import ADAPTER_REPORT_NAME, low_rank_factors

peft = pytest.importorskip("peft")
from peft import PeftModel  # noqa: E402

METHODS = {
    "ZeroUnlearn": (ZeroUnlearnHyperParams, apply_zerounlearn_to_model, 2),  # rank <= 2n
    "ZeroUnlearn-GD": (ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model, 1),  # rank <= n
}
TEXTS = ["the capital of france is paris", "many people live in london and it was known for its river"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _logits(model, tok):
    batch = tok(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def _edit(tmp_path, tok, alg, **overrides):
    cls, apply, _ = METHODS[alg]
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    hparams = cls.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name=alg, **overrides))
    base = tiny_llama(tok)
    edited, weights_copy = apply(copy.deepcopy(base), tok, forget_requests(), hparams, return_orig_weights=True,
                                 progress=False)
    return base, edited, weights_copy


@pytest.mark.parametrize("alg", sorted(METHODS))
def test_adapter_reproduces_edit_switches_off_and_merges(alg, tok, tmp_path):
    base, edited, weights_copy = _edit(tmp_path, tok, alg)
    n, factor = len(forget_requests()), METHODS[alg][2]
    report = export_lora_adapter(weights_copy, edited, tmp_path / "adapter", max_rank=factor * n)

    # the theory's rank bound holds numerically, and nothing above it was cut off
    for layer in report.layers:
        assert 1 <= layer.numerical_rank <= factor * n, layer
        assert layer.rank == layer.numerical_rank
        assert layer.relative_residual < 1e-5 and layer.weight_relative_residual < 1e-6
    stored = json.loads((tmp_path / "adapter" / ADAPTER_REPORT_NAME).read_text())
    assert [l["rank"] for l in stored["layers"]] == [l.rank for l in report.layers]
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == config["lora_alpha"] == report.r
    assert sorted(config["target_modules"]) == sorted(name[: -len(".weight")] for name in weights_copy)

    logits_base, logits_edit = _logits(base, tok), _logits(edited, tok)
    assert _rel(logits_base, logits_edit) > 1e-3  # the edit changes the logits
    peft_model = PeftModel.from_pretrained(copy.deepcopy(base), str(tmp_path / "adapter"))
    assert _rel(_logits(peft_model, tok), logits_edit) < 1e-4
    with peft_model.disable_adapter():
        assert _rel(_logits(peft_model, tok), logits_base) < 1e-7
    merged = dict(peft_model.merge_and_unload().named_parameters())
    edited_params = dict(edited.named_parameters())
    for name in weights_copy:
        assert torch.allclose(merged[name], edited_params[name], rtol=0, atol=1e-6), name


def test_a_full_rank_change_is_refused(tok, tmp_path, caplog):
    """A change of full rank (here the edit plus 5% of every edited weight, what ZeroUnlearn's retired
    ``projection_eps: 0.05`` did) cannot be a small adapter: refused, or truncated with a warning."""
    base, edited, weights_copy = _edit(tmp_path, tok, "ZeroUnlearn")
    with torch.no_grad():
        for name, original in weights_copy.items():
            dict(edited.named_parameters())[name].add_(0.05 * original)
    with pytest.raises(
        NotLowRankError, match=r"model.layers.1.mlp.down_proj.*numerical rank \d+ of 32.*save the model"
    ):
        export_lora_adapter(weights_copy, edited, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    with pytest.raises(NotLowRankError, match=r"rank 6 .*residual of [0-9.e-]+ of the weight's norm"):
        export_lora_adapter(weights_copy, edited, tmp_path / "refused", max_rank=6)
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.integrations.adapters"):
        report = export_lora_adapter(weights_copy, edited, tmp_path / "lossy", max_rank=6, allow_lossy=True)
    assert "not low rank" in caplog.text
    assert all(l.numerical_rank > 6 and l.weight_relative_residual > 1e-3 for l in report.layers)


def _add_low_rank(model, module_names, ranks, seed=0):
    """Add a random rank-``r`` change to each module's weight matrix; returns the weights before."""
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    before = {}
    for name, r in zip(module_names, ranks):
        weight = params[f"{name}.weight"]
        before[f"{name}.weight"] = weight.detach().clone()
        rows, cols = weight.shape
        with torch.no_grad():
            weight += 0.1 * torch.randn(rows, r, generator=gen) @ torch.randn(r, cols, generator=gen)
    return before


def test_layers_of_different_rank_are_zero_padded(tok, tmp_path):
    base = tiny_llama(tok)
    edited = copy.deepcopy(base)
    names = ["model.layers.0.mlp.down_proj", "model.layers.2.mlp.down_proj"]
    before = _add_low_rank(edited, names, [2, 5])
    report = export_lora_adapter(before, edited, tmp_path / "a")
    assert [l.rank for l in report.layers] == [2, 5] and report.r == 5
    peft_model = PeftModel.from_pretrained(copy.deepcopy(base), str(tmp_path / "a"))
    assert _rel(_logits(peft_model, tok), _logits(edited, tok)) < 1e-5
    # the unedited model works as "weights before" too
    report2 = export_lora_adapter(base, edited, tmp_path / "b")
    assert [l.module for l in report2.layers] == names and [l.rank for l in report2.layers] == [2, 5]


def test_gpt2_conv1d_weights(tok, tmp_path):
    base = tiny_gpt2(tok)
    edited = copy.deepcopy(base)
    before = _add_low_rank(edited, ["transformer.h.1.mlp.c_proj"], [3])
    report = export_lora_adapter(before, edited, tmp_path / "a")
    assert report.layers[0].rank == 3 and report.layers[0].shape == [32, 64]  # [d_out, d_in]
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert config["fan_in_fan_out"] is True
    peft_model = PeftModel.from_pretrained(copy.deepcopy(base), str(tmp_path / "a"))
    assert _rel(_logits(peft_model, tok), _logits(edited, tok)) < 1e-5


def test_low_rank_factors_truncate_at_noise_floor():
    gen = torch.Generator().manual_seed(0)
    exact = torch.randn(20, 4, generator=gen, dtype=torch.float64) @ torch.randn(
        4, 30, generator=gen, dtype=torch.float64
    )
    noisy = exact + 1e-9 * torch.randn(20, 30, generator=gen, dtype=torch.float64)
    B, A, S, numerical = low_rank_factors(noisy, noise_floor=1e-6)
    assert numerical == 4 and B.shape == (20, 4) and A.shape == (4, 30)
    assert torch.allclose(B @ A, exact, atol=1e-7)
    _, A2, _, numerical2 = low_rank_factors(noisy, noise_floor=1e-6, max_rank=2)
    assert numerical2 == 4 and A2.shape[0] == 2


def test_bad_weights_before_are_named(tok, tmp_path):
    model = tiny_llama(tok)
    with pytest.raises(ValueError, match="no edited weights"):
        export_lora_adapter({}, model, tmp_path / "x")
    with pytest.raises(ValueError, match="model.layers.9.mlp.down_proj.weight"):
        export_lora_adapter({"model.layers.9.mlp.down_proj.weight": torch.zeros(32, 64)}, model, tmp_path / "x")
    with pytest.raises(ValueError, match="Embedding"):
        export_lora_adapter(
            {"model.embed_tokens.weight": model.model.embed_tokens.weight.detach() + 1}, model, tmp_path / "x"
        )
