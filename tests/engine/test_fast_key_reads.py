"""The key reads' shortcuts (issue 45) give bit-identical results to full forward passes: passes of rows whose
hidden state is not used stop at the key (``hidden_rows``), and the prefix replay advances with the edit (each read
starts at the layer edited before it)."""
from __future__ import annotations

import copy
import time
from typing import Dict, List

import pytest
import torch

from tiny_models import (
    PADDED_PREFIXES,
    TINY_BUILDERS,
    forget_requests,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor import ZeroUnlearnGDHyperParams
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import EditStages, batched_statistics, neutral_targets, run_layerwise_edit
from zerounlearn_editor.engine.prefix_replay import LayerPrefixReplay
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.engine.retain import normalize_retain
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver
from zerounlearn_editor.support.model_access import get_module

BUILDERS = TINY_BUILDERS
PREFIXES = PADDED_PREFIXES
RETAIN = [
    {"prompt": "the capital of england is", "subject": "england"},
    {"prompt": "the capital of egypt is", "subject": "egypt"},
    {"prompt": "the capital of russia is", "subject": "russia"},
    {"prompt": "the capital of italy is", "subject": "italy"},
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _tmp(arch: str):
    return ("transformer.h.{}", "transformer.h.{}.mlp.c_proj") if arch == "gpt2" else (
        "model.layers.{}", "model.layers.{}.mlp.down_proj")


def _requests():
    """The 3 forget requests, then the 4 retain requests (with chunk size 2: a pass of forget rows only, a mixed
    one, two of retain rows only)."""
    return normalize_requests(forget_requests()) + normalize_retain(RETAIN)


def _read(model, tok, arch: str, layer: int, **kwargs):
    """A key read at ``layer`` (hidden state at layer 3, context moment on, passes of 2 requests)."""
    layer_tmp, rewrite_tmp = _tmp(arch)
    return read_keys_and_hidden(model, tok, _requests(), PREFIXES, rewrite_tmp.format(layer), layer_tmp.format(3),
                                "subject_last", 2, context_moment=True, **kwargs)


def _calls(module) -> List[int]:
    """A list that grows by one per forward call of ``module`` (remove the hook with ``calls.handle.remove()``)."""
    calls: List[int] = []
    handle = module.register_forward_hook(lambda *_: calls.append(1))
    return calls, handle


def _assert_same(fast, full, hidden_rows: int) -> None:
    """Keys ``[d_in, n]``, context moment and count equal bit for bit, hidden ``[hidden_rows, d]`` the full read's
    first rows."""
    assert torch.equal(fast.keys, full.keys)
    assert torch.equal(fast.context_mom2, full.context_mom2) and fast.context_count == full.context_count
    assert torch.equal(fast.hidden, full.hidden[:hidden_rows])


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3"])
def test_passes_without_wanted_hidden_states_stop_at_the_key_bit_for_bit(tok, arch):
    model = BUILDERS[arch](tok).eval()
    layer_tmp, _ = _tmp(arch)
    full = _read(model, tok, arch, 1)
    calls, handle = _calls(get_module(model, layer_tmp.format(3)))
    try:
        fast = _read(model, tok, arch, 1, hidden_rows=3)
    finally:
        handle.remove()
    assert len(calls) == 2, "layer 3 runs for the two passes holding forget rows only"
    _assert_same(fast, full, 3)
    assert fast.hidden.shape[0] == 3 and full.hidden.shape[0] == 7
    assert _read(model, tok, arch, 1, hidden_rows=0).hidden.numel() == 0


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3"])
@pytest.mark.parametrize("layers", [(1, 2, 3), (1, 3)])
@pytest.mark.parametrize("memory_bytes", [4 * 1024**2, 0])
def test_the_advancing_replay_equals_full_reads_after_each_edit(tok, tmp_path, arch, layers, memory_bytes):
    """The edit's sequence (store_next, read, advance, write-back) with the replay in memory and spilled to files:
    every read equals a full forward pass bit for bit, and a read after the first runs no layer below the one
    edited before it."""
    model = BUILDERS[arch](tok).eval()
    layer_tmp, rewrite_tmp = _tmp(arch)
    replay = LayerPrefixReplay(model, layer_tmp, layers[0], memory_bytes=memory_bytes, spill_dir=str(tmp_path))
    for position, layer in enumerate(layers):
        below = get_module(model, layer_tmp.format(layers[position - 1] - 1)) if position else None
        calls, handle = _calls(below) if below is not None else ([], None)
        try:
            replay.store_next(layer)
            fast = _read(model, tok, arch, layer, prefix_replay=replay, hidden_rows=3)
            replay.advance()
        finally:
            if handle is not None:
                handle.remove()
        assert not calls, f"layer {layers[position - 1] - 1} ran although its output was stored"
        assert replay.first == layer
        _assert_same(fast, _read(model, tok, arch, layer), 3)
        with torch.no_grad():  # the write-back
            get_module(model, rewrite_tmp.format(layer)).weight.mul_(1.3)
    replay.clear()
    assert replay.spilled_bytes == 0 and not list(tmp_path.iterdir())
    assert not any(type(m).__name__ == "_Replay" for m in model.modules())


def test_store_next_refuses_a_lower_layer_and_an_unknown_layout(tok):
    model = tiny_llama(tok).eval()
    replay = LayerPrefixReplay(model, "model.layers.{}", 2)
    replay.store_next(1)
    replay.advance()
    assert replay.first == 2
    replay.store_next(9)  # beyond the model's layers: stays where it is
    replay.advance()
    assert replay.first == 2
    unknown = LayerPrefixReplay(model, "model.blocks.{}", 1)
    unknown.store_next(2)
    unknown.advance()
    assert not unknown.enabled


def _hparams(tmp_path, layers, retain_weight: float, twin: bool) -> ZeroUnlearnGDHyperParams:
    """The robust YAML's key features on the tiny Llama: context prefixes, the context moment, a retain term and
    (``twin``) the int4 twin, passes of 2 requests."""
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "c.jsonl"), alg_name="ZeroUnlearn-GD",
                               layers=list(layers), nullspace_threshold=1e-2, chunk_size=2,
                               retain_nullspace_weight=retain_weight, context_nullspace_weight=0.1)
    if twin:
        config["quantized_forget_keys"] = {"scheme": "int4", "weight": 1.0}
    return ZeroUnlearnGDHyperParams.from_dict(config)


def _plain_keys(*args, **kwargs):
    """The keys stage as a stage of its own: the edit then reads every key in full forward passes (no replay, every
    hidden state)."""
    return read_keys_and_hidden(*args, **kwargs)


def _edit(base, tok, hp, retain, plain: bool):
    """Edit a copy of ``base``: ``(the solves' problems, the edited weights, completed passes of the last edited
    layer in the keys stage)``."""
    model = copy.deepcopy(base)
    problems: List = []
    solve = zerounlearn_gd_solver(hp)

    def recording(problem):
        problems.append(problem)
        return solve(problem)

    moments = batched_statistics(base, tok, hp, hp.mom2_dataset, progress=False)
    targets = neutral_targets(base, tok, forget_requests(), hp)
    stages = EditStages(keys=_plain_keys) if plain else EditStages()
    times: List[float] = []
    handle = model.model.layers[max(hp.layers)].register_forward_hook(lambda *_: times.append(time.perf_counter()))
    try:
        _, report = run_layerwise_edit(model, tok, forget_requests(), hp, recording, second_moments=moments,
                                       targets=targets, stages=stages, retain=retain, progress=False,
                                       fluency_guard="off")
    finally:
        handle.remove()
    weights: Dict[int, torch.Tensor] = {l: model.model.layers[l].mlp.down_proj.weight.detach().clone()
                                        for l in hp.layers}
    spans = [(start, end) for stage, start, end in report.stage_spans if stage == "keys"]
    return problems, weights, sum(any(start <= t <= end for start, end in spans) for t in times)


@pytest.mark.parametrize("layers", [(1, 2, 3), (1, 3), (2,)])
@pytest.mark.parametrize("retain", [True, False])
@pytest.mark.parametrize("twin", [True, False])
def test_the_edit_solves_the_same_problems_as_with_full_reads(tok, tmp_path, layers, retain, twin):
    """Keys, retain keys, value targets (hidden states), context moments, twin keys and the edited weights of the
    whole edit equal those of an edit whose every read is a full forward pass, bit for bit."""
    base = tiny_llama(tok).eval()
    hp = _hparams(tmp_path, layers, 0.1 if retain else 0.0, twin)
    keep = RETAIN if retain else None
    fast_problems, fast_weights, fast_calls = _edit(base, tok, hp, keep, plain=False)
    full_problems, full_weights, full_calls = _edit(base, tok, hp, keep, plain=True)
    assert len(fast_problems) == len(full_problems) == len(layers)
    for fast, full in zip(fast_problems, full_problems):
        for name in ("W", "K_f", "M_n", "C0", "K_r", "C_ctx"):
            a, b = getattr(fast, name), getattr(full, name)
            assert (a is None and b is None) or torch.equal(a, b), (fast.layer, name)
    for layer in layers:
        assert torch.equal(fast_weights[layer], full_weights[layer])
        assert not torch.equal(fast_weights[layer], base.model.layers[layer].mlp.down_proj.weight)
    if retain:  # the retain rows' passes stopped at the key
        assert fast_calls < full_calls, (fast_calls, full_calls)
