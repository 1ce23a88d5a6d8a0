"""The bad-input matrix (issue 14): requests, YAMLs, corpora, caches, dtypes and CLI arguments.

Every case asserts the error class (or the warning), that the message names the problem (file,
key, field, request index), and that the model and the cache files are unchanged -- or, for a
cache file that cannot be trusted, that it was recomputed to the right value. Tiny models only.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch
import yaml

from tiny_models import (
    CORPUS,
    forget_requests,
    tiny_gpt2,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor import stats as stats_module
from zerounlearn_editor.bench.fingerprint import ModelFingerprint
from zerounlearn_editor.hparams import HParamsError, ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams
from zerounlearn_editor.stats import (
    SecondMoment,
    StatsCacheError,
    collect_second_moments,
    layer_second_moments,
    load_second_moment,
    merge_second_moment_files,
    save_second_moment,
    stats_path,
)

MODULE = "model.layers.{}.mlp.down_proj"


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "wiki.jsonl")


def _files(folder: Path) -> Dict[str, str]:
    """Digest of every file under ``folder`` (cache files unchanged <=> equal dicts)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _stats_args(tmp_path: Path, corpus: Path, **changes):
    args = dict(stats_dir=str(tmp_path / "stats"), corpus=str(corpus), n_samples=20, dtype="float32",
                max_length=32, batch_size=8, progress=False)
    args.update(changes)
    return args


def _cache_file(tmp_path: Path, layer: int = 1, name: str = "tiny-llama") -> Path:
    return stats_path(str(tmp_path / "stats"), name, "wiki", MODULE.format(layer), "float32", 20)


def _fresh(model, tok, corpus: Path, layer: int = 1) -> SecondMoment:
    return collect_second_moments(model, tok, load_corpus_texts(corpus), [MODULE.format(layer)], 32, 8,
                                  progress=False, product_dtype=torch.float32)[MODULE.format(layer)]


def load_corpus_texts(corpus: Path):
    from zerounlearn_editor.corpus import load_corpus

    return load_corpus(str(corpus), limit=20).texts


def _no_pass(*_a, **_k):
    raise AssertionError("statistics were recomputed although cached")


# --------------------------------------------------------------------------- caches


def test_cache_of_another_model_with_the_same_folder_name_is_recomputed(tok, tmp_path, corpus, caplog):
    """Issue 14.1: two models named ``.../tiny-llama`` must not share one C0."""
    first, second = tiny_llama(tok, seed=0), tiny_llama(tok, seed=1)
    assert first.config._name_or_path == second.config._name_or_path
    layer_second_moments(first, tok, [1], MODULE, **_stats_args(tmp_path, corpus))
    digest = ModelFingerprint.of(second)
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.stats"):
        got = layer_second_moments(second, tok, [1], MODULE, **_stats_args(tmp_path, corpus))[1]
    own = _fresh(second, tok, corpus)
    torch.testing.assert_close(got.moment(), own.moment(), rtol=1e-5, atol=1e-7)
    assert "another model" in caplog.text and str(_cache_file(tmp_path)) in caplog.text
    assert digest.differences(second) == []
    # the file now holds the second model's statistic, and is reused for it without a pass
    stored, meta = load_second_moment(_cache_file(tmp_path))
    torch.testing.assert_close(stored.moment(), own.moment(), rtol=1e-5, atol=1e-7)
    assert meta["module"] == MODULE.format(1) and meta["model_fingerprint"]


def test_model_fingerprint_ignores_edits_of_the_edited_modules_and_load_dtype(tok):
    model = tiny_llama(tok)
    base = stats_module.model_fingerprint(model, MODULE)
    with torch.no_grad():
        model.model.layers[2].mlp.down_proj.weight.mul_(0.5)  # an edit: statistics stay those of the unedited model
    assert stats_module.model_fingerprint(model, MODULE) == base
    assert stats_module.model_fingerprint(tiny_llama(tok).to(torch.bfloat16), MODULE) == base
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.add_(0.01)  # another checkpoint
    assert stats_module.model_fingerprint(model, MODULE) != base


def test_easyedit_file_without_metadata_is_read(tok, tmp_path, corpus, monkeypatch):
    model = tiny_llama(tok)
    own = _fresh(model, tok, corpus)
    path = _cache_file(tmp_path)
    path.parent.mkdir(parents=True)
    np.savez(path, **{"mom2.mom2": own.mom2.numpy().astype(np.float32), "mom2.count": np.array(own.count),
                      "mom2.constructor": np.array("rome.tok_dataset.SecondMoment()"), "sample_size": np.array(20)})
    before = _files(tmp_path / "stats")
    monkeypatch.setattr(stats_module, "collect_second_moments", _no_pass)
    got = layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus))[1]
    torch.testing.assert_close(got.mom2, own.mom2.float().double())
    assert _files(tmp_path / "stats") == before


def _garbage_files():
    def truncated(path: Path, good: bytes):
        path.write_bytes(good[: len(good) // 2])

    def empty(path: Path, good: bytes):
        path.write_bytes(b"")

    def garbage(path: Path, good: bytes):
        path.write_bytes(b"\x00garbage, not an npz" * 10)

    def no_count(path: Path, good: bytes):
        np.savez(path.with_suffix(""), **{"mom2.mom2": np.eye(32, dtype=np.float32)})

    def pickled(path: Path, good: bytes):
        np.savez(path.with_suffix(""), **{"mom2.mom2": np.array([{"a": 1}], dtype=object),
                                          "mom2.count": np.array(3)})

    def not_square(path: Path, good: bytes):
        np.savez(path.with_suffix(""), **{"mom2.mom2": np.ones(5, dtype=np.float32), "mom2.count": np.array(3)})

    def nan_values(path: Path, good: bytes):
        np.savez(path.with_suffix(""), **{"mom2.mom2": np.full((64, 64), np.nan, dtype=np.float32),
                                          "mom2.count": np.array(3)})

    return [truncated, empty, garbage, no_count, pickled, not_square, nan_values]


@pytest.mark.parametrize("damage", _garbage_files(), ids=lambda f: f.__name__)
def test_unreadable_cache_file_is_recomputed_and_replaced(damage, tok, tmp_path, corpus, caplog):
    """Issue 14.5: what an interrupted writer leaves is treated as missing, not a crash."""
    model = tiny_llama(tok)
    good = layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus))[1]
    path = _cache_file(tmp_path)
    damage(path, path.read_bytes())
    with pytest.raises(StatsCacheError, match=str(path).replace(".", r"\.")):
        load_second_moment(path)
    digest = ModelFingerprint.of(model)
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.stats"):
        got = layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus))[1]
    assert str(path) in caplog.text and "recomputing" in caplog.text
    torch.testing.assert_close(got.mom2, good.mom2)
    stored, _ = load_second_moment(path)  # replaced by a readable file
    torch.testing.assert_close(stored.mom2, good.mom2.float().double())
    assert digest.differences(model) == []
    assert not list(path.parent.glob("*.tmp"))


def test_cache_file_of_another_module_is_recomputed(tok, tmp_path, corpus, caplog):
    model = tiny_llama(tok)
    layer_second_moments(model, tok, [1, 2], MODULE, **_stats_args(tmp_path, corpus))
    wrong = _cache_file(tmp_path, 2).read_bytes()
    _cache_file(tmp_path, 1).write_bytes(wrong)  # layer 2's statistic under layer 1's name
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.stats"):
        got = layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus))[1]
    assert "model.layers.2.mlp.down_proj" in caplog.text and "recomputing" in caplog.text
    torch.testing.assert_close(got.mom2, _fresh(model, tok, corpus).mom2.double(), rtol=1e-5, atol=1e-6)


def test_stale_temp_files_are_cleaned_on_the_next_write(tok, tmp_path, corpus):
    """Issue 14.5: a SIGKILLed writer's temp file does not stay beside the cache forever."""
    import socket

    model = tiny_llama(tok)
    folder = _cache_file(tmp_path).parent
    folder.mkdir(parents=True)
    host = socket.gethostname().replace(".", "_")
    name = _cache_file(tmp_path).name
    dead = folder / f"{name}.{host}.999999999.abcd1234.tmp"  # a pid that cannot be running
    old = folder / f"{name}.otherhost.12.efgh5678.tmp"
    live = folder / f"{name}.{host}.{os.getpid()}.ijkl9012.tmp"  # a writer still at work
    for tmp in (dead, old, live):
        tmp.write_bytes(b"partial")
    os.utime(old, (time.time() - 2 * stats_module.STALE_TEMP_SECONDS,) * 2)
    layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus))
    assert not dead.exists() and not old.exists() and live.exists()


def test_unwritable_stats_dir_fails_before_the_corpus_pass(tok, tmp_path, corpus, monkeypatch):
    model = tiny_llama(tok)
    blocker = tmp_path / "stats_is_a_file"
    blocker.write_text("not a folder")
    digest = ModelFingerprint.of(model)
    monkeypatch.setattr(stats_module, "collect_second_moments", _no_pass)
    with pytest.raises(StatsCacheError, match="stats_is_a_file.*cannot be written.*stats_dir"):
        layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus, stats_dir=str(blocker / "sub")))
    assert blocker.read_text() == "not a folder" and digest.differences(model) == []


def test_read_only_stats_dir_still_serves_cached_files(tok, tmp_path, corpus, monkeypatch):
    model = tiny_llama(tok)
    layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus))
    before = _files(tmp_path / "stats")
    monkeypatch.setattr(stats_module.os, "access", lambda *a, **k: False)  # as for a non-root user on a 0555 folder
    monkeypatch.setattr(stats_module, "collect_second_moments", _no_pass)
    layer_second_moments(model, tok, [1], MODULE, **_stats_args(tmp_path, corpus))
    assert _files(tmp_path / "stats") == before
    with pytest.raises(StatsCacheError, match="cannot be written"):
        layer_second_moments(model, tok, [2], MODULE, **_stats_args(tmp_path, corpus))


def test_concurrent_writers_leave_one_complete_file(tmp_path):
    path = tmp_path / "stats" / "m" / "wiki_stats" / "x_float32_mom2_20.npz"
    values = [SecondMoment(torch.full((48, 48), float(i + 1), dtype=torch.float64), 10 * (i + 1)) for i in range(6)]
    errors = []

    def write(stat):
        try:
            for _ in range(5):
                save_second_moment(path, stat, 20, "float32", {"module": "x"})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stat, meta = load_second_moment(path)
    assert stat.count in {v.count for v in values}
    assert torch.equal(stat.mom2, torch.full((48, 48), stat.count / 10))
    assert not list(path.parent.glob("*.tmp"))


def test_bfloat16_statistics_dtype_is_rejected_at_load(tmp_path, corpus):
    """Issue 14.6: numpy has no bfloat16; say so when the YAML is read, not when saving."""
    config = tiny_hparams_dict(tmp_path / "stats", corpus, mom2_dtype="bfloat16")
    with pytest.raises(HParamsError, match="mom2_dtype.*bfloat16"):
        ZeroUnlearnHyperParams.from_dict(config, source="tiny.yaml")
    with pytest.raises(StatsCacheError, match="bfloat16"):
        save_second_moment(tmp_path / "x.npz", SecondMoment(torch.eye(2), 1), 1, "bfloat16", {})
    assert not (tmp_path / "x.npz").exists()


def test_stats_merge_refuses_the_same_file_twice_and_unknown_modules(tok, tmp_path, corpus):
    """Issue 14.8: ordinary cache files of two layers, or one file twice, are not shards of one statistic."""
    model = tiny_llama(tok)
    layer_second_moments(model, tok, [1, 2], MODULE, **_stats_args(tmp_path, corpus))
    one, two = _cache_file(tmp_path, 1), _cache_file(tmp_path, 2)
    out = tmp_path / "merged.npz"
    with pytest.raises(ValueError, match="more than once"):
        merge_second_moment_files(out, [one, one])
    copy = tmp_path / "copy.npz"
    copy.write_bytes(one.read_bytes())
    with pytest.raises(ValueError, match="identical contents"):
        merge_second_moment_files(out, [one, copy])
    with pytest.raises(ValueError, match="module"):
        merge_second_moment_files(out, [one, two])
    plain = []
    for i, path in enumerate((one, two)):
        stat, _ = load_second_moment(path)
        plain.append(tmp_path / f"easyedit{i}.npz")
        np.savez(plain[-1], **{"mom2.mom2": stat.mom2.numpy(), "mom2.count": np.array(stat.count)})
    with pytest.raises(ValueError, match="cannot tell which module"):
        merge_second_moment_files(out, plain)
    assert not out.exists()
