"""C0 statistics split across processes: shard files and ``stats-merge``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.data.corpus import load_corpus
from zerounlearn_editor.engine.stats import (
    SecondMoment,
    collect_second_moments,
    layer_second_moments,
    load_second_moment,
    merge_second_moment_files,
    save_second_moment,
    shard_path,
    shard_texts,
    stats_path,
)

MODULES = ["model.layers.1.mlp.down_proj", "model.layers.2.mlp.down_proj"]
WORLD = 2


def test_shards_partition_the_passages_and_sum_to_the_whole(tmp_path: Path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok)
    texts = load_corpus(str(write_corpus(tmp_path / "corpus.jsonl"))).texts
    parts = [shard_texts(texts, (r, 3)) for r in range(3)]
    assert sorted(t for p in parts for t in p) == sorted(texts)
    whole = collect_second_moments(model, tok, texts, MODULES[:1], 32, 4, progress=False)[MODULES[0]]
    total = SecondMoment(torch.zeros_like(whole.mom2), 0)
    for r in range(3):
        total = total.merge(
            collect_second_moments(model, tok, texts, MODULES[:1], 32, 4, progress=False, shard=(r, 3))[MODULES[0]]
        )
    assert total.count == whole.count
    torch.testing.assert_close(total.mom2, whole.mom2, rtol=1e-6, atol=1e-8)
    # a shard without passages contributes zeros over zero tokens
    empty = collect_second_moments(model, tok, texts[:1], MODULES[:1], 32, 4, progress=False, shard=(1, 2))[MODULES[0]]
    assert empty.count == 0 and empty.mom2.shape == (64, 64) and not empty.mom2.any()
    with pytest.raises(ValueError, match="invalid shard"):
        shard_texts(texts, (2, 2))


def _merge_inputs(tmp_path: Path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok)
    corpus = str(write_corpus(tmp_path / "corpus.jsonl"))
    stats_dir = str(tmp_path / "stats")
    shards = []
    for r in range(WORLD):
        layer_second_moments(
            model,
            tok,
            [1, 2],
            "model.layers.{}.mlp.down_proj",
            stats_dir,
            corpus,
            100,
            "float32",
            32,
            4,
            progress=False,
            shard=(r, WORLD),
        )
        shards.append(
            {
                layer: shard_path(
                    stats_path(stats_dir, "tiny-llama", "corpus", MODULES[layer - 1], "float32", 100), r, WORLD
                )
                for layer in (1, 2)
            }
        )
    assert all(path.exists() for paths in shards for path in paths.values())
    return model, tok, corpus, stats_dir, shards


def test_stats_merge_cli_equals_a_single_process_file(tmp_path: Path):
    model, tok, corpus, stats_dir, shards = _merge_inputs(tmp_path)
    full = layer_second_moments(model, tok, [1], "model.layers.{}.mlp.down_proj", str(tmp_path / "single"), corpus, 100,
                                "float32", 32, 4, progress=False)[1]
    out = tmp_path / "merged" / "layer1.npz"
    out.parent.mkdir()
    assert cli_main(["stats-merge", str(out), str(shards[0][1]), str(shards[1][1])]) == 0
    merged, meta = load_second_moment(out)
    assert merged.count == full.count
    torch.testing.assert_close(merged.mom2, full.mom2, rtol=1e-6, atol=1e-6)
    with np.load(out, allow_pickle=False) as data:  # EasyEdit's layout, in the shards' dtype
        assert {"mom2.mom2", "mom2.count", "mom2.constructor", "sample_size"} <= set(data.files)
        assert data["mom2.mom2"].dtype == np.float32 and int(data["sample_size"]) == 100
    assert "shard" not in meta and int(meta["n_passages"]) == len(load_corpus(corpus).texts)
    assert not list(out.parent.glob("*.tmp"))
    # merged into the cache path, the file is what layer_second_moments loads
    cache = stats_path(stats_dir, "tiny-llama", "corpus", "model.layers.1.mlp.down_proj", "float32", 100)
    assert shard_path(cache, 0, WORLD) == shards[0][1]
    merge_second_moment_files(cache, [shards[0][1], shards[1][1]])
    loaded = layer_second_moments(
        model, tok, [1], "model.layers.{}.mlp.down_proj", stats_dir, corpus, 100, "float32", 32, 4, progress=False
    )[1]
    torch.testing.assert_close(loaded.mom2, merged.mom2)


def test_stats_merge_rejects_inconsistent_shards(tmp_path: Path):
    _, _, _, _, shards = _merge_inputs(tmp_path)
    out = tmp_path / "out.npz"
    with pytest.raises(ValueError, match="shape"):
        other = tmp_path / "other.npz"
        save_second_moment(other, SecondMoment(torch.zeros(3, 3), 5), 100, "float32", {"shard": "1/2"})
        merge_second_moment_files(out, [shards[0][1], other])
    with pytest.raises(ValueError, match="more than once"):
        merge_second_moment_files(out, [shards[0][1], shards[0][1]])
    with pytest.raises(ValueError, match="missing"):
        merge_second_moment_files(out, [shards[0][1]])
    # shards of two different layers have the same shape but are not one statistic
    assert cli_main(["stats-merge", str(out), str(shards[0][1]), str(shards[1][2])]) == 2
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_stats_cli_shard_writes_mergeable_files(tmp_path: Path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok)
    model_dir = tmp_path / "tiny-llama"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    hp = tiny_hparams_dict(tmp_path / "stats", corpus, mom2_dtype="float32")
    hp_file = tmp_path / "hp.yaml"
    hp_file.write_text(yaml.safe_dump(hp))
    for rank in range(WORLD):
        assert (
            cli_main(["stats", "--hparams", str(hp_file), "--model", str(model_dir), "--shard", f"{rank}/{WORLD}"]) == 0
        )
    cache = stats_path(str(tmp_path / "stats"), "tiny-llama", "corpus", "model.layers.2.mlp.down_proj", "float32", 100)
    files = [shard_path(cache, r, WORLD) for r in range(WORLD)]
    assert all(f.exists() for f in files) and not cache.exists()
    assert cli_main(["stats-merge", str(cache), *map(str, files)]) == 0
    full = collect_second_moments(model, tok, load_corpus(str(corpus)).texts, [MODULES[1]], 32, 8, progress=False,
                                  product_dtype=torch.float32)[MODULES[1]]
    merged, _ = load_second_moment(cache)
    assert merged.count == full.count
    torch.testing.assert_close(merged.mom2, full.mom2, rtol=1e-5, atol=1e-5)
