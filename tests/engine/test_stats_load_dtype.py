"""``C0`` caches and the load dtype (issue 46 item 10): a float16 load of a float32 checkpoint is the same model
(its cache is reused, not recomputed), and a half-precision model never writes over a full-precision model's
statistic."""
from __future__ import annotations

import copy
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny_models import tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor.engine.stats import layer_second_moments, load_second_moment, model_fingerprint
from zerounlearn_editor.engine.stats.cache import save_second_moment

MODULE = "model.layers.{}.mlp.down_proj"


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _args(tmp_path: Path):
    corpus = str(write_corpus(tmp_path / "corpus.jsonl"))
    return ([1, 2], MODULE, str(tmp_path / "stats"), corpus, 20, "float64", 32, 8, "tiny")


def _files(tmp_path: Path):
    return {p: p.read_bytes() for p in sorted((tmp_path / "stats").rglob("*.npz"))}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_load_reuses_the_float32_cache(tok, tmp_path, caplog, dtype):
    model = tiny_llama(tok)
    half = copy.deepcopy(model).to(dtype)
    if dtype == torch.float16:  # the exact fingerprint cannot agree here (double rounding): the case at issue
        assert model_fingerprint(half, MODULE) != model_fingerprint(model, MODULE)
    args = _args(tmp_path)
    full = layer_second_moments(model, tok, *args, progress=False)
    written = _files(tmp_path)
    caplog.clear()
    caplog.set_level(logging.INFO)
    again = layer_second_moments(half, tok, *args, progress=False)
    assert "another model with the same folder name" not in caplog.text
    assert _files(tmp_path) == written  # reused, not recomputed or overwritten
    assert all(torch.equal(again[l].mom2, full[l].mom2) for l in (1, 2))


def test_another_model_in_half_precision_is_not_the_same(tok, tmp_path, caplog):
    args = _args(tmp_path)
    full = layer_second_moments(tiny_llama(tok), tok, *args, progress=False)
    written = _files(tmp_path)
    other = tiny_llama(tok, seed=7).to(torch.float16)
    caplog.clear()
    recomputed = layer_second_moments(other, tok, *args, progress=False)
    assert "another model with the same folder name" in caplog.text
    assert not torch.equal(recomputed[1].mom2, full[1].mom2)
    assert "used but not written over it" in caplog.text
    assert _files(tmp_path) == written  # the float32 model's statistic stays


def test_a_float32_file_without_a_sample_is_not_overwritten_by_a_half_model(tok, tmp_path, caplog):
    """A file written before the sample was recorded: the float16 load cannot be told to be the same weights, so
    its statistic is computed, used, and the file is left as it was."""
    model = tiny_llama(tok)
    args = _args(tmp_path)
    layer_second_moments(model, tok, *args, progress=False)
    for path in (tmp_path / "stats").rglob("*.npz"):
        stat, meta = load_second_moment(path)
        meta.pop("model_sample")
        kept = {k: v for k, v in meta.items() if k not in ("sample_size", "dtype")}
        save_second_moment(path, stat, int(np.load(path)["sample_size"]), "float64", kept)
    written = _files(tmp_path)
    caplog.clear()
    layer_second_moments(copy.deepcopy(model).to(torch.float16), tok, *args, progress=False)
    assert "used but not written over it" in caplog.text
    assert _files(tmp_path) == written


def test_a_float32_file_without_a_sample_gets_one_from_its_model(tok, tmp_path, caplog):
    """A file written before the sample was recorded, read by its own float32 model: the sample is added (the
    statistic unchanged), and a float16 load then reuses it."""
    model = tiny_llama(tok)
    args = _args(tmp_path)
    full = layer_second_moments(model, tok, *args, progress=False)
    for path in (tmp_path / "stats").rglob("*.npz"):
        stat, meta = load_second_moment(path)
        meta.pop("model_sample")
        kept = {k: v for k, v in meta.items() if k not in ("sample_size", "dtype")}
        save_second_moment(path, stat, int(np.load(path)["sample_size"]), "float64", kept)
    layer_second_moments(model, tok, *args, progress=False)
    assert all("model_sample" in load_second_moment(p)[1] for p in (tmp_path / "stats").rglob("*.npz"))
    written = _files(tmp_path)
    caplog.clear()
    again = layer_second_moments(copy.deepcopy(model).to(torch.float16), tok, *args, progress=False)
    assert "another model" not in caplog.text and _files(tmp_path) == written
    assert all(torch.equal(again[l].mom2, full[l].mom2) for l in (1, 2))
