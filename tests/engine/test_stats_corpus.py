"""Corpus formats, the one-pass C0 statistic and its EasyEdit-layout cache (tiny model)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny_models import CORPUS, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor.data.corpus import CorpusError, load_corpus
from zerounlearn_editor.engine import stats as stats_module
from zerounlearn_editor.engine.stats import collect_second_moments, corpus_cache_name, layer_second_moments, stats_path
from zerounlearn_editor.support.model_access import capture_inputs

MODULE = "model.layers.{}.mlp.down_proj"


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_txt_corpus_paragraphs_and_lines(tmp_path: Path):
    paragraphs = tmp_path / "paragraphs.txt"
    paragraphs.write_text("first line\nstill first\n\nsecond one\n\n\nthird\n")
    assert load_corpus(str(paragraphs)).texts == ["first line still first", "second one", "third"]
    lines = tmp_path / "lines.txt"
    lines.write_text("one\ntwo\nthree\n")
    corpus = load_corpus(str(lines), limit=2)
    assert corpus.texts == ["one", "two"] and corpus_cache_name(str(lines)) == "lines"


def test_jsonl_corpus_errors_name_the_line(tmp_path: Path):
    good = write_corpus(tmp_path / "c.jsonl")
    assert len(load_corpus(str(good)).texts) == len(CORPUS)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": "no text"}) + "\n")
    with pytest.raises(CorpusError, match=r"bad.jsonl: line 2: missing string field 'text'"):
        load_corpus(str(bad))
    with pytest.raises(CorpusError, match="corpus file not found"):
        load_corpus(str(tmp_path / "missing.jsonl"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(CorpusError, match="is empty"):
        load_corpus(str(empty))


def test_saved_datasets_folder_is_a_corpus(tmp_path: Path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": CORPUS[:5]})}).save_to_disk(str(folder))
    corpus = load_corpus(str(folder))
    assert corpus.texts == CORPUS[:5] and corpus_cache_name(str(folder)) == "saved"


def test_one_pass_moments_equal_a_direct_computation(tok):
    model = tiny_llama(tok)
    texts = CORPUS[:6]
    names = [MODULE.format(1), MODULE.format(3)]
    got = collect_second_moments(model, tok, texts, names, max_length=32, batch_size=4, progress=False)
    for name in names:
        feats = []
        for text in texts:
            with capture_inputs(model, [name]) as captured, torch.no_grad():
                model(tok(text, return_tensors="pt").input_ids)
            feats.append(captured[name][0].double())
        K = torch.cat(feats)
        torch.testing.assert_close(got[name].mom2, K.t() @ K, rtol=1e-5, atol=1e-7)
        assert got[name].count == K.shape[0]


def test_forward_stops_after_the_last_edited_layer(tok, monkeypatch):
    model = tiny_llama(tok)
    calls = []
    handle = model.model.layers[3].register_forward_pre_hook(lambda *_: calls.append(3))
    collect_second_moments(model, tok, CORPUS[:3], [MODULE.format(1)], 32, 8, progress=False)
    handle.remove()
    assert calls == []


def test_cache_layout_reuse_and_fingerprint(tok, tmp_path: Path, monkeypatch):
    model = tiny_llama(tok)
    corpus = write_corpus(tmp_path / "wiki.jsonl")
    args = dict(stats_dir=str(tmp_path / "stats"), corpus=str(corpus), n_samples=20, dtype="float32",
                max_length=32, batch_size=8, progress=False)
    first = layer_second_moments(model, tok, [1, 2], MODULE, **args)
    path = stats_path(str(tmp_path / "stats"), "tiny-llama", "wiki", MODULE.format(1), "float32", 20)
    assert path.name == "model.layers.1.mlp.down_proj_float32_mom2_20.npz"
    with np.load(path, allow_pickle=False) as data:
        assert {"mom2.mom2", "mom2.count", "mom2.constructor", "sample_size"} <= set(data.files)
        assert int(data["sample_size"]) == 20 and data["mom2.mom2"].dtype == np.float32
    assert not list(path.parent.glob("*.tmp"))
    assert oct(path.stat().st_mode & 0o777) == "0o644"

    def no_pass(*a, **k):
        raise AssertionError("statistics were recomputed although cached")

    monkeypatch.setattr(stats_module, "collect_second_moments", no_pass)
    again = layer_second_moments(model, tok, [1, 2], MODULE, **args)
    for layer in (1, 2):  # the edit that computed C0 used what the file holds, bit for bit (its eigh cache key)
        assert torch.equal(again[layer].mom2, first[layer].mom2) and again[layer].count == first[layer].count
        assert first[layer].mom2.dtype == torch.float64
    # Passages cut at another length give another C0: the cache does not answer for them.
    with pytest.raises(AssertionError, match="recomputed"):
        layer_second_moments(model, tok, [1], MODULE, **{**args, "max_length": 16})
    # Another version of the corpus file: the cache no longer matches and is recomputed.
    corpus.write_text(corpus.read_text() + json.dumps({"text": "a new passage"}) + "\n")
    with pytest.raises(AssertionError, match="recomputed"):
        layer_second_moments(model, tok, [1], MODULE, **args)
