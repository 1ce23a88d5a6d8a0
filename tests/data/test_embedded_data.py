"""Embedded defaults: the built-in statistics corpus and perplexity text, shipped YAMLs, data-folder errors."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from tiny_models import tiny_llama, tiny_tokenizer, REPO_ROOT
from zerounlearn_editor.data import builtin as embedded
from zerounlearn_editor.engine import stats as stats_module
from zerounlearn_editor.data.corpus import HUB_DATASETS, load_corpus
from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.support.resources import (
    hparams_path,
    missing_data_message,
    shared_data_dir,
    shared_file,
)
from zerounlearn_editor.engine.stats import corpus_cache_name, layer_second_moments, stats_path

ROOT = REPO_ROOT
SHARED_TEXT = (shared_data_dir() or ROOT.parent / "shared" / "data") / "text"
MODULE = "model.layers.{}.mlp.down_proj"


def test_builtin_corpus_is_the_3643_passages_with_the_jsonl_fingerprint():
    corpus = load_corpus("wiki_passages_3643")
    data = embedded.builtin_corpus_bytes("wiki_passages_3643")
    assert len(corpus.texts) == 3643
    assert corpus.fingerprint == hashlib.sha256(data).hexdigest() == embedded._SHA256["wiki_passages_3643.jsonl.xz"]
    assert load_corpus("wiki_passages", limit=5).texts == corpus.texts[:5]  # alias, limit keeps the order
    assert corpus_cache_name("wiki_passages") == corpus_cache_name("wiki_passages_3643") == "wiki_passages_3643"
    assert corpus_cache_name("../shared/data/text/wiki_passages_3643.jsonl") == "wiki_passages_3643"


@pytest.mark.skipif(not (SHARED_TEXT / "wiki_passages_3643.jsonl").is_file(), reason="shared data not beside the repo")
def test_builtin_data_equal_the_shared_files():
    from_file = load_corpus(str(SHARED_TEXT / "wiki_passages_3643.jsonl"))
    builtin = load_corpus("wiki_passages_3643")
    assert builtin.texts == from_file.texts and builtin.fingerprint == from_file.fingerprint
    assert embedded.default_ppl_text().read_bytes() == (SHARED_TEXT / "wikitext2_raw_test.txt").read_bytes()


def test_ppl_text_is_unpacked_once_and_repaired(tmp_path: Path):
    path = embedded.default_ppl_text(cache_dir=tmp_path)
    assert path == tmp_path / "wikitext2_raw_test.txt"
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == embedded._SHA256["wikitext2_raw_test.txt.xz"]
    assert data.startswith(b" = Robert Boulter = \n") and len(data) == 1287656
    path.write_bytes(b"damaged")
    assert embedded.default_ppl_text(cache_dir=tmp_path).read_bytes() == data


def test_a_jsonl_cache_is_reused_by_the_builtin_name(tmp_path: Path, monkeypatch):
    """Statistics cached from the .jsonl file match the built-in corpus: same file name, same fingerprint."""
    jsonl = tmp_path / "wiki_passages_3643.jsonl"
    jsonl.write_bytes(embedded.builtin_corpus_bytes("wiki_passages_3643"))
    tok = tiny_tokenizer()
    model = tiny_llama(tok)
    stats_dir = tmp_path / "stats"
    from_file = layer_second_moments(model, tok, [1], MODULE, str(stats_dir), str(jsonl), 12, "float64", 16, 4, "tiny")
    path = stats_path(str(stats_dir), "tiny", "wiki_passages_3643", MODULE.format(1), "float64", 12)
    assert path.is_file()

    def no_recompute(*args, **kwargs):
        raise AssertionError("the cached statistics should have been reused")

    monkeypatch.setattr(stats_module, "collect_second_moments", no_recompute)
    builtin = layer_second_moments(model, tok, [1], MODULE, str(stats_dir), "wiki_passages_3643", 12, "float64", 16, 4, "tiny")
    assert builtin[1].count == from_file[1].count > 0
    assert builtin[1].mom2.equal(from_file[1].mom2)


def _shipped_yamls():
    return sorted((ROOT / "hparams").rglob("*.yaml"))


def test_shipped_yamls_name_a_builtin_or_hub_corpus():
    assert len(_shipped_yamls()) >= 20
    for path in _shipped_yamls():
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        if "mom2_dataset" in config:
            name = config["mom2_dataset"]
            assert embedded.builtin_corpus_name(name) or name in HUB_DATASETS, f"{path}: mom2_dataset {name!r}"
        assert "shared" not in path.read_text(encoding="utf-8"), f"{path} names a path outside the repository"


def test_hparams_path_finds_the_checkout_yaml():
    assert hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct") == ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml"
    with pytest.raises(FileNotFoundError, match="hparams file hparams/ZeroUnlearn/nope.yaml not found"):
        hparams_path("ZeroUnlearn", "nope")


def test_missing_benchmark_data_says_where_it_looked(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("ZEROUNLEARN_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        load_cases("counterfact")
    message = str(info.value)
    assert str(tmp_path / "counterfact" / "counterfact_rome_1129.json") in message
    assert "--data-dir" in message and "ZEROUNLEARN_DATA_DIR" in message
    with pytest.raises(FileNotFoundError, match="--data-dir DIR"):
        shared_file("text/nothing.txt")
    monkeypatch.delenv("ZEROUNLEARN_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    assert "../shared/data beside the working directory" in missing_data_message("zsre/x.json")


def test_cli_data_dir_sets_the_data_folder(tmp_path: Path, monkeypatch):
    from zerounlearn_editor.cli import main

    monkeypatch.setenv("ZEROUNLEARN_DATA_DIR", "/nonexistent")
    (tmp_path / "counterfact").mkdir()
    assert main(["bench", "--data-dir", str(tmp_path / "missing"), "--hparams", "x", "--data", "counterfact", "--out", "o"]) == 2
    # an existing folder is used: the bench then fails on the missing file inside it, naming it
    code = main(["bench", "--data-dir", str(tmp_path), "--hparams", str(ROOT / "hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml"),
                 "--data", "counterfact", "--out", str(tmp_path / "out"), "--methods", "base"])
    assert code == 2
    import os

    assert os.environ["ZEROUNLEARN_DATA_DIR"] == str(tmp_path.resolve())
