"""Models split across devices (``device_map``): every tensor goes to its consumer's device.

A CPU-only machine has one device, so the split is emulated with dtypes: the start of a
5-layer tiny Llama (embeddings, layers 0-1) stays float32 ("device A"), layers 2-4 (with or
without the final norm and lm_head) become float64 ("device B"), and each placed module gets a pre-hook
that converts its floating inputs to its own dtype -- what accelerate's ``AlignDevicesHook``
does with devices. Tensors our code hands across the boundary (hidden states captured at one
layer and fed to the norm / head, the target residual added at the last edited layer, the
logits the loss is computed from) must be converted to the consumer's dtype/device; those
conversions go through ``.to(device=..., dtype=...)`` of the consuming module's weight.
Real two-GPU placement can only be checked on a machine with two GPUs.
"""
from __future__ import annotations

import ast

import pytest
import torch
from torch import nn

from tiny_models import REPO_ROOT, forget_requests, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import (
    EditReport,
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
)
from zerounlearn_editor.engine.stats import collect_second_moments
from zerounlearn_editor.harness.reference_pipeline import apply_zerounlearn_per_request
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

PACKAGE = REPO_ROOT / "zerounlearn_editor"
EDIT_PATH_MODULES = [
    "engine/stats/__init__.py",
    "engine/stats/collect.py",
    "engine/stats/cache.py",
    "engine/pipeline.py",
    "engine/targets/__init__.py",
    "engine/targets/kv_suffix.py",
    "engine/adam.py",
    "engine/keys.py",
    "engine/contexts.py",
    "engine/encoding.py",
    "support/model_access.py",
    "harness/reference_pipeline.py",
    "methods/zerounlearn/method.py",
    "methods/zerounlearn_gd/method.py",
    "methods/zerounlearn/solve.py",
    "methods/zerounlearn_gd/solve.py",
]
# "device B" for a 5-layer tiny Llama: the layers after layer 1, with or without the final norm and head
SPLITS = {
    "head-on-B": ["model.layers.2", "model.layers.3", "model.layers.4", "model.norm", "lm_head"],
    "head-on-A": ["model.layers.2", "model.layers.3", "model.layers.4"],
}


def _convert(value, dtype):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, tuple):
        return tuple(_convert(v, dtype) for v in value)
    return value


def split_model(model: nn.Module, device_b, dtype=torch.float64) -> nn.Module:
    """Move the modules ``device_b`` to ``dtype``; every placed module (embeddings, each layer,
    final norm, head) converts its inputs to its own dtype (accelerate-style pre-hooks)."""
    for name in device_b:
        get_module(model, name).to(dtype)
    placed = ["model.embed_tokens", "model.norm", "lm_head"] + [
        f"model.layers.{i}" for i in range(len(model.model.layers))
    ]
    for name in placed:
        module = get_module(model, name)

        def align(_module, args, kwargs, dtype=next(module.parameters()).dtype):
            return _convert(args, dtype), {k: _convert(v, dtype) for k, v in kwargs.items()}

        module.register_forward_pre_hook(align, with_kwargs=True)
    return model


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _weights(model, hp):
    return {
        l: get_weight_matrix(get_module(model, hp.rewrite_module_tmp.format(l))).detach().double().clone()
        for l in hp.layers
    }


@pytest.mark.parametrize(
    "method, cls, apply",
    [
        ("ZeroUnlearn", ZeroUnlearnHyperParams, apply_zerounlearn_to_model),
        ("ZeroUnlearn", ZeroUnlearnHyperParams, apply_zerounlearn_per_request),
        ("ZeroUnlearn-GD", ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model),
    ],
    ids=["zerounlearn", "zerounlearn-per-request", "zerounlearn-gd"],
)
@pytest.mark.parametrize(
    "split, loss_layer", [("head-on-B", -1), ("head-on-A", -1), ("head-on-A", 3)],
    ids=["head-on-B", "head-on-A", "head-on-A-loss-layer-3"],
)
def test_edit_across_a_split_model_matches_the_unsplit_edit(method, cls, apply, split, loss_layer, tok, tmp_path):
    """Edited layers 1 (device A) and 2 (device B): keys on both, targets at layer 2 (B), the loss
    read after the head or at layer 3 (B) and normed by ``model.norm`` (A or B)."""
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    hp = cls.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name=method, v_loss_layer=loss_layer))
    reference, _ = apply(tiny_llama(tok, layers=5), tok, forget_requests(), hp, progress=False)
    model = split_model(tiny_llama(tok, layers=5), SPLITS[split])
    assert get_module(model, "model.layers.1.mlp.down_proj").weight.dtype == torch.float32
    assert get_module(model, "model.layers.2.mlp.down_proj").weight.dtype == torch.float64
    original = _weights(model, hp)
    report = EditReport()
    edited, _ = apply(
        model,
        tok,
        forget_requests(),
        hp.replace(stats_dir=str(tmp_path / "stats_split")),
        progress=False,
        report=report,
    )
    got, want = _weights(edited, hp), _weights(reference, hp)
    for layer in hp.layers:
        assert report.layer_change_norm[layer] > 1e-3  # also for the float64 weight
        assert not torch.equal(got[layer], original[layer])
        # float64 on "device B" rounds differently from the all-float32 reference
        torch.testing.assert_close(got[layer], want[layer], rtol=1e-3, atol=1e-5)


def test_statistics_across_a_split_model(tok, tmp_path):
    texts = ["the capital of france is paris", "berlin is a city in germany"] * 3
    modules = ["model.layers.1.mlp.down_proj", "model.layers.3.mlp.down_proj"]
    want = collect_second_moments(tiny_llama(tok, layers=5), tok, texts, modules, 32, 4, progress=False)
    got = collect_second_moments(
        split_model(tiny_llama(tok, layers=5), SPLITS["head-on-B"]), tok, texts, modules, 32, 4, progress=False
    )
    for name in modules:
        assert got[name].count == want[name].count
        torch.testing.assert_close(got[name].mom2, want[name].mom2, rtol=1e-4, atol=1e-6)


def test_edit_path_has_no_hard_coded_device():
    """No ``.cuda()`` call and no ``"cuda..."`` literal where statistics, keys, targets and edits are computed."""
    for relative in EDIT_PATH_MODULES:
        tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not node.value.startswith("cuda"), f"{relative}:{node.lineno}: hard-coded device {node.value!r}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr != "cuda", f"{relative}:{node.lineno}: .cuda() call"
