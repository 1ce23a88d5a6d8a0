"""Key reads after the first skip the unedited layers (prefix_replay) and give bit-identical results."""
from __future__ import annotations

import copy

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
from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.engine.prefix_replay import LayerPrefixReplay
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
from zerounlearn_editor.support.model_access import get_module

BUILDERS = TINY_BUILDERS
PREFIXES = PADDED_PREFIXES


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _tmp(arch: str):
    return ("transformer.h.{}", "transformer.h.{}.mlp.c_proj") if arch == "gpt2" else (
        "model.layers.{}", "model.layers.{}.mlp.down_proj")


def _read(model, tok, arch, layer, replay=None, chunk_size=2):
    layer_tmp, rewrite_tmp = _tmp(arch)
    return read_keys_and_hidden(
        model, tok, normalize_requests(forget_requests()), PREFIXES, rewrite_tmp.format(layer),
        layer_tmp.format(3), "subject_last", chunk_size, prefix_replay=replay,
    )


def _count_calls(module):
    calls = []
    handle = module.register_forward_hook(lambda *_: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3"])
def test_replayed_reads_equal_full_reads_after_edits(tok, arch):
    model = BUILDERS[arch](tok).eval()
    layer_tmp, rewrite_tmp = _tmp(arch)
    replay = LayerPrefixReplay(model, layer_tmp, 2)
    assert replay.enabled
    first = _read(model, tok, arch, 2, replay)  # stores layer 1's output per chunk
    assert torch.equal(first.keys, _read(model, tok, arch, 2).keys)
    # edit layer 2 (as an edit does), then read layer 3 both ways
    with torch.no_grad():
        get_module(model, rewrite_tmp.format(2)).weight.mul_(1.7)
    calls, handle = _count_calls(get_module(model, layer_tmp.format(0)))
    try:
        replayed = _read(model, tok, arch, 3, replay)
    finally:
        handle.remove()
    assert not calls, "layer 0 ran although its output was replayed"
    full = _read(model, tok, arch, 3)
    assert torch.equal(replayed.keys, full.keys)
    assert torch.equal(replayed.hidden, full.hidden)
    assert not torch.equal(full.hidden, first.hidden)  # the edit changed what later layers see
    assert type(get_module(model, layer_tmp.format(0))).__name__ != "_Replay"


def test_replay_refuses_a_chunk_of_another_shape(tok):
    model = tiny_llama(tok).eval()
    replay = LayerPrefixReplay(model, "model.layers.{}", 2)
    _read(model, tok, "llama", 2, replay, chunk_size=2)
    calls, handle = _count_calls(model.model.layers[0])
    try:
        other = _read(model, tok, "llama", 2, replay, chunk_size=3)  # one chunk of another shape
    finally:
        handle.remove()
    assert calls, "a chunk of another shape must be computed, not replayed"
    assert torch.equal(other.keys, _read(model, tok, "llama", 2, chunk_size=3).keys)


def test_replay_disabled_for_first_layer_zero_or_an_unknown_layout(tok):
    model = tiny_llama(tok).eval()
    assert not LayerPrefixReplay(model, "model.layers.{}", 0).enabled
    assert not LayerPrefixReplay(model, "model.blocks.{}", 2).enabled
    replay = LayerPrefixReplay(model, "model.blocks.{}", 2)
    assert torch.equal(_read(model, tok, "llama", 2, replay).keys, _read(model, tok, "llama", 2).keys)


@pytest.mark.parametrize("method", ["ZeroUnlearn", "ZeroUnlearn-GD"])
def test_edit_writes_the_same_weights_as_full_reads(tmp_path, tok, method, monkeypatch):
    """The whole edit with the replay equals the edit with every read a full forward pass."""
    cls, apply = ((ZeroUnlearnHyperParams, apply_zerounlearn_to_model) if method == "ZeroUnlearn"
                  else (ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model))
    extra = {} if method == "ZeroUnlearn" else {"nullspace_threshold": 1e-2}
    hp = cls.from_dict(tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "c.jsonl"), alg_name=method,
                                         layers=[2, 3], **extra))
    base = tiny_llama(tok).eval()
    moments = batched_statistics(base, tok, hp, hp.mom2_dataset, progress=False)
    targets = neutral_targets(base, tok, forget_requests(), hp)
    edited, layer0_calls = {}, {}
    for replay_on in (True, False):
        model = copy.deepcopy(base)
        if not replay_on:
            monkeypatch.setattr(LayerPrefixReplay, "enabled", property(lambda self: False))
        calls, handle = _count_calls(model.model.layers[0])
        try:
            apply(model, tok, forget_requests(), hp, second_moments=moments, targets=targets, progress=False)
        finally:
            handle.remove()
        layer0_calls[replay_on] = len(calls)
        edited[replay_on] = [model.model.layers[i].mlp.down_proj.weight.detach().clone() for i in (2, 3)]
        monkeypatch.undo()
    assert layer0_calls[True] < layer0_calls[False], layer0_calls  # the replay really ran in the edit
    assert not torch.equal(edited[True][0], base.model.layers[2].mlp.down_proj.weight)
    for a, b in zip(edited[True], edited[False]):
        assert torch.equal(a, b)


def test_replay_checks_the_chunk_contents_and_respects_its_memory_budget(tok):
    model = tiny_llama(tok).eval()
    replay = LayerPrefixReplay(model, "model.layers.{}", 2)
    first = _read(model, tok, "llama", 2, replay, chunk_size=3)
    other = [{"prompt": "the capital of spain is", "subject": "spain", "ground_truth": "madrid"},
             {"prompt": "the capital of italy is", "subject": "italy", "ground_truth": "rome"},
             {"prompt": "the capital of china is", "subject": "china", "ground_truth": "beijing"}]
    requests = normalize_requests(other)
    calls, handle = _count_calls(model.model.layers[0])
    try:
        replayed = read_keys_and_hidden(
            model,
            tok,
            requests,
            PREFIXES,
            "model.layers.2.mlp.down_proj",
            "model.layers.3",
            "subject_last",
            3,
            prefix_replay=replay,
        )
    finally:
        handle.remove()
    assert calls, "a chunk with other tokens must be computed, not replayed"
    full = read_keys_and_hidden(model, tok, requests, PREFIXES, "model.layers.2.mlp.down_proj", "model.layers.3",
                                "subject_last", 3)
    assert torch.equal(replayed.keys, full.keys) and not torch.equal(replayed.keys, first.keys)
    tight = LayerPrefixReplay(model, "model.layers.{}", 2, max_bytes=0)  # nothing may be stored
    _read(model, tok, "llama", 2, tight)
    calls, handle = _count_calls(model.model.layers[0])
    try:
        _read(model, tok, "llama", 3, tight)
    finally:
        handle.remove()
    assert calls
    replay.clear()
    calls, handle = _count_calls(model.model.layers[0])
    try:
        _read(model, tok, "llama", 2, replay, chunk_size=3)
    finally:
        handle.remove()
    assert calls, "cleared outputs are not replayed"


def test_key_reads_hold_at_most_key_rows_per_pass_rows(tok, monkeypatch):
    """However large chunk_size is, one forward pass of a key read runs at most KEY_ROWS_PER_PASS rows (whole
    requests), so its activations do not grow with the batch; the keys equal those of one pass per request."""
    import zerounlearn_editor.engine.keys as keys_module

    monkeypatch.setattr(keys_module, "KEY_ROWS_PER_PASS", 7)  # 3 prefixes: 2 requests (6 rows) per pass
    model = tiny_llama(tok).eval()
    rows = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kw: rows.append(kw["input_ids"].shape[0]),
                                             with_kwargs=True)
    try:
        big = _read(model, tok, "llama", 2, chunk_size=64)
    finally:
        handle.remove()
    n = len(forget_requests())
    assert max(rows) == 6 and sum(rows) == 3 * n
    single = _read(model, tok, "llama", 2, chunk_size=1)
    torch.testing.assert_close(big.keys, single.keys, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(big.hidden, single.hidden, rtol=1e-5, atol=1e-6)


def _assert_layer_3_read_replays_bit_for_bit(model, tok, replay):
    """A read at layer 3 through ``replay`` runs no layer 0 and equals a full forward pass bit for bit."""
    calls, handle = _count_calls(model.model.layers[0])
    try:
        replayed = _read(model, tok, "llama", 3, replay)
    finally:
        handle.remove()
    assert not calls, "layer 0 ran although its output was stored"
    full = _read(model, tok, "llama", 3)
    assert torch.equal(replayed.keys, full.keys) and torch.equal(replayed.hidden, full.hidden)


def test_outputs_past_the_memory_budget_are_replayed_from_files_and_removed(tok, tmp_path):
    """memory_bytes = 0: every chunk's output goes to a file in spill_dir; later reads replay them bit for bit
    without running the unedited layers, and clear() removes the folder."""
    model = tiny_llama(tok).eval()
    replay = LayerPrefixReplay(model, "model.layers.{}", 2, memory_bytes=0, spill_dir=str(tmp_path))
    first = _read(model, tok, "llama", 2, replay)
    files = list(tmp_path.glob("zerounlearn_replay_*/chunk_*.safetensors"))
    assert files and replay.spilled_bytes > 0
    assert torch.equal(first.keys, _read(model, tok, "llama", 2).keys)
    with torch.no_grad():
        model.model.layers[2].mlp.down_proj.weight.mul_(1.3)
    _assert_layer_3_read_replays_bit_for_bit(model, tok, replay)
    replay.clear()
    assert not list(tmp_path.iterdir()) and replay.spilled_bytes == 0
    budget = LayerPrefixReplay(model, "model.layers.{}", 2, memory_bytes=10**9, spill_dir=str(tmp_path))
    _read(model, tok, "llama", 2, budget)  # within the memory budget: no file
    assert not list(tmp_path.iterdir()) and budget.spilled_bytes == 0


def test_a_spill_folder_that_cannot_be_written_keeps_the_outputs_in_memory(tok, tmp_path, caplog):
    """memory_bytes = 0 with a spill_dir that is a file: the write fails, a warning says so, the outputs stay in
    memory and later reads still replay them bit for bit."""
    model = tiny_llama(tok).eval()
    not_a_folder = tmp_path / "a_file"
    not_a_folder.write_text("x")
    replay = LayerPrefixReplay(model, "model.layers.{}", 2, memory_bytes=0, spill_dir=str(not_a_folder))
    with caplog.at_level("WARNING", logger="zerounlearn_editor.engine.prefix_replay"):
        first = _read(model, tok, "llama", 2, replay)
    assert "cannot write to a temporary folder" in caplog.text
    assert replay.spilled_bytes == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
    assert torch.equal(first.keys, _read(model, tok, "llama", 2).keys)
    _assert_layer_3_read_replays_bit_for_bit(model, tok, replay)
