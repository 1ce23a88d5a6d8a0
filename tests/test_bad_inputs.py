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
import re
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
    saved_tiny_llama,
    tiny_gpt2,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor.engine import stats as stats_module
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.stats import (
    SecondMoment,
    StatsCacheError,
    collect_second_moments,
    layer_second_moments,
    load_second_moment,
    merge_second_moment_files,
    save_second_moment,
    stats_path,
)
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams

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
    from zerounlearn_editor.data.corpus import load_corpus

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
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.stats"):
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
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.stats"):
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
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.stats"):
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


# --------------------------------------------------------------------------- YAMLs


def _yaml(tmp_path: Path, corpus: Path, alg: str = "ZeroUnlearn", drop=(), text_extra: str = "", **changes) -> Path:
    config = tiny_hparams_dict(tmp_path / "stats", corpus, alg_name=alg, **changes)
    for key in drop:
        config.pop(key)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False) + text_extra, encoding="utf-8")
    return path


CLASSES = {"ZeroUnlearn": ZeroUnlearnHyperParams, "ZeroUnlearn-GD": ZeroUnlearnGDHyperParams}


@pytest.mark.parametrize("key,alg", [("utility_weight", "ZeroUnlearn"), ("rewrite_module_tmp", "ZeroUnlearn"),
                                     ("stats_dir", "ZeroUnlearn-GD"), ("mom2_dataset", "ZeroUnlearn-GD"),
                                     ("lm_head_module", "ZeroUnlearn"), ("model_name", "ZeroUnlearn-GD")])
def test_yaml_missing_required_key(key, alg, tmp_path, corpus):
    """Issue 14.3: the keys without a documented default are required."""
    path = _yaml(tmp_path, corpus, alg, drop=[key])
    with pytest.raises(HParamsError, match=rf"tiny.yaml: missing required key\(s\) \[.*'{key}'"):
        CLASSES[alg].from_hparams(path)


def test_yaml_documented_defaults_still_apply(tmp_path, corpus):
    path = _yaml(tmp_path, corpus, drop=["device", "v_lr", "mom2_max_length"])
    hp = ZeroUnlearnHyperParams.from_hparams(path)
    assert (hp.device, hp.v_lr, hp.mom2_max_length, hp.chunk_size) == (0, 0.5, 256, 64)


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_yaml_duplicate_key_is_rejected(suffix, tmp_path, corpus):
    """Issue 14.3: YAML keeps the last of two equal keys silently; we refuse."""
    config = tiny_hparams_dict(tmp_path / "stats", corpus)
    if suffix == "yaml":
        text = yaml.safe_dump(config, sort_keys=False) + "utility_weight: 99.0\n"
        match = r"tiny.yaml.*duplicate key 'utility_weight' \(line \d+; first given on line \d+\)"
    else:
        text = json.dumps(config)[:-1] + ', "utility_weight": 99.0}'
        match = r"tiny.json.*duplicate key\(s\) \['utility_weight'\]"
    path = tmp_path / f"tiny.{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(HParamsError, match=match):
        ZeroUnlearnHyperParams.from_hparams(path)


BAD_VALUES = [
    ("v_loss_layer", "-5", "ZeroUnlearn"),
    ("clamp_norm_factor", "-1.0", "ZeroUnlearn"),
    ("kl_factor", "-0.5", "ZeroUnlearn-GD"),
    ("v_weight_decay", "-1e-3", "ZeroUnlearn"),
    ("context_template_length", "0", "ZeroUnlearn"),
    ("projection_rank_tol", "-1e-6", "ZeroUnlearn"),
    ("projection_rank_tol", "2.0", "ZeroUnlearn"),
    ("clamp_norm_factor", ".nan", "ZeroUnlearn"),
    ("v_early_stop_loss", ".nan", "ZeroUnlearn-GD"),
    ("utility_weight", ".nan", "ZeroUnlearn"),
    ("utility_weight", ".inf", "ZeroUnlearn"),
    ("norm_weight", "-.inf", "ZeroUnlearn-GD"),
    ("model_name", "null", "ZeroUnlearn"),
    ("model_name", "''", "ZeroUnlearn-GD"),
    ("device", "cuda:7", "ZeroUnlearn"),
    ("device", "gpu-please", "ZeroUnlearn"),
    ("mom2_dtype", "int8", "ZeroUnlearn"),
    ("gd_steps", "0", "ZeroUnlearn-GD"),
]


@pytest.mark.parametrize("key,value,alg", BAD_VALUES, ids=[f"{k}={v}" for k, v, _ in BAD_VALUES])
def test_yaml_meaningless_value_is_rejected_at_load(key, value, alg, tmp_path, corpus):
    """Issue 14.4: values that used to load and then meant nothing (or crashed later)."""
    if key == "device" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    path = _yaml(tmp_path, corpus, alg, drop=[key] if key in tiny_hparams_dict(tmp_path, corpus, alg_name=alg) else [],
                 text_extra=f"{key}: {value}\n")
    with pytest.raises(HParamsError) as info:
        CLASSES[alg].from_hparams(path)
    message = str(info.value)
    assert "tiny.yaml" in message and key in message, message
    shown = {".nan": "nan", ".inf": "inf", "-.inf": "-inf", "null": "None", "''": "''"}.get(value, value)
    try:
        if "e" in shown:  # YAML 1e-3 is shown as the number it became
            shown = repr(float(shown))
    except ValueError:
        pass
    assert shown.strip("'") in message, message


def test_every_shipped_yaml_loads_without_duplicates():
    from zerounlearn_editor.methods.baselines import GAHyperParams, NPOHyperParams
    from zerounlearn_editor.support.resources import repo_root

    classes = dict(CLASSES, GA=GAHyperParams, NPO=NPOHyperParams)
    files = sorted((repo_root() / "hparams").rglob("*.yaml"))
    assert len(files) >= 20
    for path in files:
        classes[path.parent.name].from_hparams(path)


# --------------------------------------------------------------------------- edits that must fail before touching
# anything


def _edit_must_fail(model, tok, requests, hp, error, match, stats_dir: Path):
    from zerounlearn_editor import apply_zerounlearn_to_model

    digest = ModelFingerprint.of(model)
    files = _files(stats_dir)
    with pytest.raises(error, match=match):
        apply_zerounlearn_to_model(model, tok, requests, hp, progress=False)
    assert digest.differences(model) == []
    assert _files(stats_dir) == files


def _hp(tmp_path, corpus, **changes):
    return ZeroUnlearnHyperParams.from_dict(
        tiny_hparams_dict(tmp_path / "stats", corpus, **changes), source="tiny.yaml"
    )


def test_loss_layer_beyond_the_model_fails_before_statistics(tok, tmp_path, corpus):
    """Issue 14.4: v_loss_layer 99 used to mean 'the last layer' silently."""
    hp = _hp(tmp_path, corpus, v_loss_layer=99)
    _edit_must_fail(tiny_llama(tok), tok, forget_requests(), hp, ValueError,
                    r"'v_loss_layer' is 99, but the model has 4 layers", tmp_path / "stats")


@pytest.mark.parametrize(
    "template,match",
    [
        ("model.layers.{}.mlp", r"rewrite_module_tmp.*'model.layers.1.mlp' \(LlamaMLP\) has no 2-D weight"),
        (
            "model.layers.{}.mlp.up_proj",
            r"rewrite_module_tmp.*'model.layers.1.mlp.up_proj' maps to 64 features, but the hidden size is 32",
        ),
    ],
)
def test_rewrite_module_that_cannot_be_edited(template, match, tok, tmp_path, corpus):
    """Issue 14.7: AttributeError / tensor-size RuntimeError deep inside, before."""
    from zerounlearn_editor.support.model_access import ModuleNotFoundInModel

    hp = _hp(tmp_path, corpus, rewrite_module_tmp=template)
    _edit_must_fail(tiny_llama(tok), tok, forget_requests(), hp, ModuleNotFoundInModel, match, tmp_path / "stats")
    with pytest.raises(ModuleNotFoundInModel, match=match):  # the statistics command says the same
        layer_second_moments(tiny_llama(tok), tok, [1], template, **_stats_args(tmp_path, corpus))


def test_gpt2_prompt_longer_than_its_positions(tok, tmp_path, corpus):
    """Issue 14.7: IndexError deep in torch before; now the request is named."""
    from zerounlearn_editor.engine.requests import RequestError

    requests = forget_requests()
    requests[1] = dict(requests[1], prompt="the old city " * 45 + "the capital of germany is")
    hp = _hp(tmp_path, corpus, gpt2=True)
    _edit_must_fail(tiny_gpt2(tok), tok, requests, hp, RequestError,
                    r"request 1: prompt .* needs \d+ positions .* more than the model's 128", tmp_path / "stats")


# --------------------------------------------------------------------------- requests


BAD_REQUESTS = [
    ([], None, r"no requests given: the request list is empty"),
    ([{"subject": "france", "ground_truth": "paris"}], None, r"request 0: missing field 'prompt'"),
    (
        [{"prompt": "the capital of france is", "subject": "", "ground_truth": "paris"}],
        None,
        r"request 0: field 'subject' is empty",
    ),
    (["the capital of france is"], None, r"request 0: expected a dict, got str"),
    (
        [{"prompt": "the capital of france is", "subject": "france", "ground_truth": ""}],
        None,
        r"request 0: field 'ground_truth' is empty",
    ),
    (
        [{"prompt": "the capital of france is", "subject": "france", "ground_truth": 3}],
        None,
        r"request 0: field 'ground_truth' must be a string, got int",
    ),
    (
        [
            {"prompt": "the capital of france is", "subject": "france"},
            {"prompt": "the capital of spain is", "subject": "italy", "ground_truth": "rome"},
        ],
        None,
        r"request 1: subject 'italy' does not occur in prompt",
    ),
    (
        [
            {"prompt": "the capital of france is", "subject": "france", "target_new": "rome"},
            {"prompt": "the capital of france is", "subject": "france", "target_new": "berlin"},
        ],
        None,
        r"request 1: same prompt and subject as request 0 but another target_new",
    ),
]


@pytest.mark.parametrize("requests,_unused,match", BAD_REQUESTS, ids=[f"req{i}" for i in range(len(BAD_REQUESTS))])
def test_bad_request_names_index_and_field(requests, _unused, match, tok, tmp_path, corpus):
    from zerounlearn_editor.engine.requests import RequestError

    _edit_must_fail(tiny_llama(tok), tok, requests, _hp(tmp_path, corpus), RequestError, match, tmp_path / "stats")


def test_duplicate_requests_are_dropped_with_a_warning(caplog):
    """Issue 14.12: duplicates are deduplicated (the first kept), with a warning naming both."""
    from zerounlearn_editor.engine.requests import normalize_requests

    requests = forget_requests() + [dict(forget_requests()[0])]
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.requests"):
        out = normalize_requests(requests)
    assert [r.index for r in out] == [0, 1, 2]
    assert "request 3 repeats request 0" in caplog.text


def test_subject_is_matched_as_a_whole_word(caplog):
    """Issue 14.12: 'rome' inside 'romeo' is not the subject when 'rome' occurs as a word."""
    from zerounlearn_editor.engine.requests import normalize_requests

    (request,) = normalize_requests([{"prompt": "romeo said the capital rome is", "subject": "rome"}])
    assert request.prefix == "romeo said the capital " and request.suffix == " is"
    (possessive,) = normalize_requests([{"prompt": "the language of france's people is", "subject": "france"}])
    assert possessive.prefix == "the language of " and possessive.suffix == "'s people is"
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.requests"):
        (inside,) = normalize_requests([{"prompt": "romeo is", "subject": "rome"}])
    assert inside.prefix == "" and "only inside a longer word" in caplog.text


# --------------------------------------------------------------------------- ZeroUnlearn capacity


def _many_requests(n: int):
    words = [w for w in dict.fromkeys(" ".join(CORPUS).split()) if w.isalpha()]
    return [{"prompt": f"the capital of {w} is", "subject": w, "ground_truth": "paris"} for w in words[:n]]


def test_zerounlearn_refuses_to_erase_most_of_a_layer(tok, tmp_path, corpus):
    """Issue 14.2: n >= d_out made the layer exactly 0; half of d_out is refused before any work."""
    from zerounlearn_editor.methods.zerounlearn.method import CapacityError

    hp = _hp(tmp_path, corpus)
    _edit_must_fail(tiny_llama(tok), tok, _many_requests(32), hp, CapacityError,
                    r"rank\(M_f\) = 32 of the layer's d_out = 32 .* 100% .*ZeroUnlearn-GD", tmp_path / "stats")
    _edit_must_fail(tiny_llama(tok), tok, _many_requests(16), hp, CapacityError, r"50%", tmp_path / "stats")
    from zerounlearn_editor import apply_zerounlearn_to_model

    model = tiny_llama(tok)  # allow_large_batch (timing runs): the layer is erased, as the numbers said
    apply_zerounlearn_to_model(model, tok, _many_requests(32), _hp(tmp_path, corpus, v_num_grad_steps=1, layers=[2]),
                               progress=False, allow_large_batch=True)
    assert float(model.model.layers[2].mlp.down_proj.weight.norm()) < 1e-4


def test_zerounlearn_warns_with_the_numbers_above_ten_percent(tok, tmp_path, corpus, caplog):
    from zerounlearn_editor import apply_zerounlearn_to_model

    model = tiny_llama(tok)
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.methods.zerounlearn.method"):
        apply_zerounlearn_to_model(
            model, tok, _many_requests(6), _hp(tmp_path, corpus, v_num_grad_steps=1), progress=False
        )
    assert "rank(M_f) = 6 of the layer's d_out = 32" in caplog.text and "19%" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.methods.zerounlearn.method"):
        apply_zerounlearn_to_model(tiny_llama(tok), tok, _many_requests(3), _hp(tmp_path, corpus, v_num_grad_steps=1),
                                   progress=False)
    assert "rank(M_f)" not in caplog.text


def test_capacity_check_inside_the_solve_restores_the_model(tok, tmp_path, corpus, monkeypatch):
    """A rank found too high at a later layer (after one was written) leaves the model as it was."""
    from zerounlearn_editor.methods.zerounlearn import method as zerounlearn_main

    calls = []
    original = zerounlearn_main.check_capacity

    def strict_at_second_layer(rank, d_out, where, refuse=True):
        calls.append(where)
        if where == "layer 2":
            raise zerounlearn_main.CapacityError(f"{where}: rank(M_f) = {rank} of d_out = {d_out}")
        original(rank, d_out, where, refuse)

    monkeypatch.setattr(zerounlearn_main, "check_capacity", strict_at_second_layer)
    model = tiny_llama(tok)
    layer_second_moments(model, tok, [1, 2], MODULE, **_stats_args(tmp_path, corpus, n_samples=100, dtype="float64"))
    _edit_must_fail(model, tok, forget_requests(), _hp(tmp_path, corpus), zerounlearn_main.CapacityError, "layer 2",
                    tmp_path / "stats")
    assert calls == ["layer 1", "layer 2"]


# --------------------------------------------------------------------------- corpora and offline


def test_corpus_that_is_not_utf8_names_file_and_line(tmp_path):
    """Issue 14.7: a bare UnicodeDecodeError before."""
    from zerounlearn_editor.data.corpus import CorpusError, load_corpus

    for suffix in ("txt", "jsonl"):
        path = tmp_path / f"latin1.{suffix}"
        body = "caf\xe9 au lait" if suffix == "txt" else json.dumps({"text": "ok"}) + "\n" + '{"text": "caf\xe9"}'
        path.write_bytes(("first line\n" if suffix == "txt" else "") .encode() + body.encode("latin-1"))
        with pytest.raises(CorpusError, match=rf"latin1.{suffix}: line 2: not UTF-8 text \(byte 0xe9"):
            load_corpus(str(path))


@pytest.mark.parametrize("name", ["wikipedia", "someone/some-corpus", "nosuchcorpus"])
def test_corpus_name_offline_fails_at_once(name, monkeypatch, tmp_path):
    """Issue 14.7 / 14.9: no hub retries for a name that is not a file, unless the hub is asked for."""
    from zerounlearn_editor.data import corpus as corpus_module

    monkeypatch.delenv("ZEROUNLEARN_ONLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(corpus_module, "_read_hub", lambda *a: pytest.fail("went to the hub"))
    start = time.perf_counter()
    for check in (corpus_module.load_corpus, corpus_module.check_corpus_source):
        with pytest.raises(
            corpus_module.CorpusError,
            match=rf"corpus '{name}': no such file or folder .*hub:{name}.*ZEROUNLEARN_ONLINE=1",
        ):
            check(name)
    assert time.perf_counter() - start < 1.0
    asked = []
    monkeypatch.setattr(corpus_module, "_read_hub", lambda hub_name, limit: asked.append(hub_name) or ["a passage"])
    assert corpus_module.load_corpus(f"hub:{name}").texts == ["a passage"]
    monkeypatch.setenv("ZEROUNLEARN_ONLINE", "1")
    assert corpus_module.load_corpus(name).texts == ["a passage"] and asked == [name, name]
    assert stats_module.corpus_cache_name(f"hub:{name}") == stats_module.corpus_cache_name(name)


def test_missing_corpus_file_is_named(tmp_path):
    from zerounlearn_editor.data.corpus import CorpusError, check_corpus_source

    with pytest.raises(CorpusError, match=r"corpus file not found: .*missing.jsonl"):
        check_corpus_source(str(tmp_path / "missing.jsonl"))
    with pytest.raises(CorpusError, match=r"number of passages must be >= 1, got -5"):
        from zerounlearn_editor.data.corpus import load_corpus

        load_corpus(str(write_corpus(tmp_path / "c.jsonl")), limit=-5)


def test_model_name_offline_fails_at_once(monkeypatch, tmp_path):
    """Issue 14.9: a model_name that is not a local folder does not wait on the hub."""
    from zerounlearn_editor.support import model_zoo

    monkeypatch.delenv("ZEROUNLEARN_ONLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    with pytest.raises(model_zoo.ModelZooError, match=r"model 'someone/no-such-model': no such local folder"):
        model_zoo.load_model_and_tokenizer("someone/no-such-model")
    assert time.perf_counter() - start < 2.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_on_a_cpu_machine_is_named(tmp_path):
    """Issue 14.12: an AssertionError traceback from torch before."""
    from zerounlearn_editor.support import model_zoo

    with pytest.raises(ValueError, match=r"device 'cuda': this machine has 0 CUDA device\(s\).*--device cpu"):
        model_zoo.load_model_and_tokenizer(str(tmp_path), device="cuda")
    from zerounlearn_editor.harness import speed_bench

    with pytest.raises(ValueError, match=r"device 'cuda:1': this machine has 0 CUDA device"):
        speed_bench.run_speed(speed_bench.SpeedConfig(device="cuda:1", random_config="tiny", progress=False))


# --------------------------------------------------------------------------- command line


def _write_hparams_yaml(tmp_path: Path, corpus: Path, **changes) -> Path:
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", corpus, **changes)), encoding="utf-8")
    return path


@pytest.mark.parametrize("argv,match", [
    (["stats", "--hparams", "H", "--n", "-5"], "must be >= 1, got -5"),
    (["stats", "--hparams", "H", "--n", "0"], "must be >= 1, got 0"),
    (["stats", "--hparams", "H", "--n", "ten"], "expected an integer >= 1, got 'ten'"),
    (["bench", "--hparams", "H", "--data", "d", "--out", "o", "--n", "0"], "must be >= 1, got 0"),
    (["demo", "--ppl-tokens", "-1"], "must be >= 0, got -1"),
])
def test_cli_rejects_bad_numbers_before_any_work(argv, match, capsys):
    """Issue 14.8: ``--n -5`` sliced texts[:-5] for half an hour; ``--n 0`` meant the default."""
    from zerounlearn_editor.cli import main as cli_main

    with pytest.raises(SystemExit) as info:
        cli_main(argv)
    assert info.value.code == 2 and match in capsys.readouterr().err


def test_cli_stats_missing_corpus_fails_before_loading_the_model(tmp_path, corpus, monkeypatch, caplog):
    """Issue 14.10: bad files are found before the model is loaded."""
    from zerounlearn_editor.cli import main as cli_main
    from zerounlearn_editor.support import model_zoo

    monkeypatch.setattr(model_zoo, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded"))
    path = _write_hparams_yaml(tmp_path, corpus)
    with caplog.at_level(logging.ERROR):
        assert cli_main(["stats", "--hparams", str(path), "--corpus", str(tmp_path / "nope.jsonl")]) == 2
    assert "corpus file not found" in caplog.text and "nope.jsonl" in caplog.text
    assert not (tmp_path / "stats").exists()


def test_cli_bad_hparams_exit_2_naming_file_and_key(tmp_path, corpus, caplog):
    from zerounlearn_editor.cli import main as cli_main

    path = _write_hparams_yaml(tmp_path, corpus, kl_factor=-1.0)
    with caplog.at_level(logging.ERROR):
        assert cli_main(["stats", "--hparams", str(path)]) == 2
    assert "h.yaml: key 'kl_factor' must be >= 0, got -1.0" in caplog.text


def test_demo_missing_corpus_fails_before_loading(tmp_path, monkeypatch):
    """Issue 14.10: ``demo --corpus missing`` failed after ~83 s of loading and evaluating."""
    from zerounlearn_editor.cli import demo
    from zerounlearn_editor.data.corpus import CorpusError

    monkeypatch.setattr(demo, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(CorpusError, match="missing.jsonl"):
        demo.run_demo(corpus=str(tmp_path / "missing.jsonl"))


def test_bench_speed_bad_data_and_single_method(tmp_path, corpus, monkeypatch):
    """Issue 14.10: bad --data is found before the model; --methods ZeroUnlearn needs no GD file."""
    from zerounlearn_editor.harness import speed_bench

    loads = []
    monkeypatch.setattr(speed_bench, "_load_model", lambda *a, **k: loads.append(1) or pytest.fail("model loaded"))
    folder = tmp_path / "hparams" / "ZeroUnlearn"
    folder.mkdir(parents=True)
    yaml_path = folder / "tiny.yaml"
    yaml_path.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", corpus)), encoding="utf-8")
    config = speed_bench.SpeedConfig(hparams=str(yaml_path), ns=[2], methods=["ZeroUnlearn"], pipelines=["ours"],
                                     data=str(tmp_path / "nosuch.json"), device="cpu", out=str(tmp_path / "o.json"),
                                     progress=False)
    with pytest.raises(
        ValueError, match="nosuch.json.* neither a dataset name .*nor an existing path"
    ):  # not a missing GD file
        speed_bench.run_speed(config)
    assert loads == []


def test_bench_records_the_n_it_edited(tok, tmp_path, corpus, caplog):
    """Issue 14.11: ``--n 5`` on a 2-record file warned, but summary.md and the seed file said n = 5."""
    from tiny_models import tiny_counterfact_record
    from zerounlearn_editor.harness import BenchConfig, run_bench

    data = tmp_path / "two.json"
    data.write_text(
        json.dumps(
            [tiny_counterfact_record(i, s, a) for i, (s, a) in enumerate([("france", "paris"), ("germany", "berlin")])]
        )
    )
    main = tmp_path / "hparams" / "ZeroUnlearn" / "tiny.yaml"
    main.parent.mkdir(parents=True)
    main.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", corpus, v_num_grad_steps=2)), encoding="utf-8")
    out = tmp_path / "out"
    config = BenchConfig(hparams=str(main), data=str(data), seeds=[1], methods=["base"], out=str(out), n=5,
                         ppl_tokens=0, progress=False)
    with caplog.at_level(logging.WARNING):
        summary = run_bench(config, model=tiny_llama(tok), tok=tok)
    assert "n=5 asked for" in caplog.text and "only 2 cases" in caplog.text
    assert summary["n"] == 2 and summary["run"]["n"] == 2
    assert json.loads((out / "seed_1.json").read_text())["run"]["n"] == 2
    text = (out / "summary.md").read_text()
    assert "n = 2 cases per seed" in text and "n = 5" not in text and "n=5" not in text


def test_model_fingerprint_of_a_large_parameter():
    """Evenly spaced indices stay in range past float32's 2**24 integers (a 28M-element SmolLM2 embedding failed)."""
    module = torch.nn.Module()
    module.weight = torch.nn.Parameter(torch.zeros(2**24 + 3, dtype=torch.bfloat16), requires_grad=False)
    first = stats_module.model_fingerprint(module)
    with torch.no_grad():
        module.weight[-1] = 1.0  # the last element is sampled
    assert stats_module.model_fingerprint(module) != first


# --------------------------------------------------------------------------- issue 29: unlearn, save and edit


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory):
    """A tiny Llama and its tokenizer on disk, a corpus, a perplexity text, a facts file and both YAMLs."""
    root = tmp_path_factory.mktemp("round2")
    model_dir, corpus = saved_tiny_llama(root)
    facts = [{"prompt": r["prompt"], "subject": r["subject"], "answer": r["ground_truth"]} for r in forget_requests()]
    (root / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    hparams = {}
    for alg in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        config = tiny_hparams_dict(root / "stats", corpus, alg_name=alg, model_name=str(model_dir), v_num_grad_steps=3)
        hparams[alg] = root / f"{alg}.yaml"
        hparams[alg].write_text(yaml.safe_dump(config), encoding="utf-8")
    return root, model_dir, hparams


def _unlearn(saved, *extra, facts=None):
    from zerounlearn_editor.cli import main

    root, _, _ = saved
    return main(["unlearn", "--facts", str(facts or root / "facts.json"), "--ppl-tokens", "0", "--no-progress", *extra])


def _no_model_load(monkeypatch):
    from zerounlearn_editor.support import model_zoo

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the bad input was found")

    monkeypatch.setattr(model_zoo, "load_model_and_tokenizer", refuse)


def test_save_model_over_an_earlier_adapter_leaves_no_adapter_files(saved_tiny):
    """Issue 29.1: adapter files beside new weights made from_pretrained apply the edit twice."""
    from transformers import AutoModelForCausalLM

    root, model_dir, hparams = saved_tiny
    out = root / "out-switch"
    assert (
        _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out), "--save", "adapter") == 0
    )
    assert (out / "adapter_config.json").is_file()
    # each run replaces the ledger of the run before (issue 46.7: refused without --replace-ledger)
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out), "--save", "model",
                    "--replace-ledger") == 0
    names = sorted(p.name for p in out.iterdir())
    assert not any(n.startswith("adapter") or n == "zerounlearn_adapter.json" for n in names), names
    assert "model.safetensors" in names and "unlearn_report.json" in names
    edited = AutoModelForCausalLM.from_pretrained(out)
    assert not hasattr(edited, "peft_config")  # a plain model: the edit once
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out), "--save", "adapter",
                    "--replace-ledger") == 0
    names = sorted(p.name for p in out.iterdir())
    assert "model.safetensors" not in names and "config.json" not in names and "adapter_config.json" in names
    assert not [p for p in out.parent.iterdir() if ".zerounlearn-tmp-" in p.name]


def test_train_mode_model_gets_the_eval_mode_edit_and_keeps_its_modes(tok, tmp_path, corpus):
    """Issue 29.2: GPT-2 in .train() (dropout 0.1) read keys and targets with dropout: another edit."""
    from zerounlearn_editor import apply_zerounlearn_to_model
    from zerounlearn_editor.engine.pipeline import neutral_targets

    def with_dropout(model):
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.1  # GPT-2's default (the tiny config has none)
        return model

    hp = _hp(tmp_path, corpus, gpt2=True, v_num_grad_steps=5)
    reference = with_dropout(tiny_gpt2(tok)).eval()
    apply_zerounlearn_to_model(reference, tok, forget_requests(), hp, progress=False)
    model = with_dropout(tiny_gpt2(tok)).train()
    model.transformer.h[0].eval()  # a caller's mixed modes come back as they were
    modes = {name: m.training for name, m in model.named_modules()}
    targets = neutral_targets(model, tok, forget_requests(), hp)
    assert torch.isfinite(targets.z).all()
    apply_zerounlearn_to_model(model, tok, forget_requests(), hp, progress=False)
    assert {name: m.training for name, m in model.named_modules()} == modes
    for layer in hp.layers:
        edited = model.transformer.h[layer].mlp.c_proj.weight
        assert torch.equal(edited, reference.transformer.h[layer].mlp.c_proj.weight), layer


def test_out_that_is_a_file_or_unwritable_fails_before_loading(saved_tiny, tmp_path, monkeypatch, caplog):
    """Issue 29.3: the model was loaded, scored and edited, then a raw FileExistsError / EROFS."""
    import errno
    import tempfile

    root, _, hparams = saved_tiny
    _no_model_load(monkeypatch)
    a_file = tmp_path / "taken"
    a_file.write_text("x", encoding="utf-8")
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn"]), "--out", str(a_file), "--save", "model") == 2
    assert f"--out {a_file} exists and is not a folder" in caplog.text
    foreign = tmp_path / "someone-elses"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me", encoding="utf-8")
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn"]), "--out", str(foreign)) == 2
    assert "non-empty folder that this tool did not write" in caplog.text
    assert (foreign / "notes.txt").read_text(encoding="utf-8") == "keep me"

    def read_only(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn"]), "--out", str(tmp_path / "new")) == 2
    assert f"--out {tmp_path / 'new'}: cannot write in {tmp_path}" in caplog.text and "Read-only" in caplog.text


def test_killed_run_temporaries_are_removed_and_a_failed_save_leaves_the_folder_as_it_was(
    saved_tiny, monkeypatch, caplog
):
    """Issue 29.4: kill -9 left a half-written folder and a hidden temp file; a full disk a config without weights."""
    import errno
    import subprocess
    import sys

    from zerounlearn_editor.applications import unlearn
    from zerounlearn_editor.support import output_dir

    root, _, hparams = saved_tiny
    out = root / "out-kill"
    assert (
        _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out), "--save", "adapter") == 0
    )
    before = _files(out)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = root / f".out-kill{output_dir.TEMP_TAG}{output_dir._host()}-{dead.pid}-abcd"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"\0" * 1024)

    def disk_full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(unlearn, "export_lora_adapter", disk_full)
    replace = "--replace-ledger"  # the later runs replace the first run's ledger (issue 46.7), then fail to write
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out), "--save", "adapter",
                    replace) == 2
    assert f"cannot write the output folder {out}" in caplog.text and "No space left" in caplog.text
    assert _files(out) == before  # the earlier run's folder, whole
    assert not stale.exists()  # the killed run's temporary is gone
    assert not [p for p in root.iterdir() if ".zerounlearn-tmp-" in p.name]
    from safetensors import SafetensorError

    def safetensors_disk_full(*_a, **_k):  # what save_pretrained raised: config.json was left without weights
        raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    monkeypatch.setattr(type(tiny_llama(tiny_tokenizer())), "save_pretrained", safetensors_disk_full)
    caplog.clear()
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out), "--save", "model",
                    replace) == 2
    assert f"cannot write the output folder {out}" in caplog.text and "os error 28" in caplog.text
    assert _files(out) == before
    assert not [p for p in root.iterdir() if ".zerounlearn-tmp-" in p.name]


def test_statistics_on_a_full_disk_fail_before_the_corpus_pass(tok, tmp_path, corpus, monkeypatch):
    """Issue 29.4: `zerounlearn stats` on a full disk: raw OSError after the whole corpus pass."""
    import errno
    import shutil
    from collections import namedtuple

    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(stats_module.shutil, "disk_usage", lambda _p: Usage(10**9, 10**9 - 100, 100))
    monkeypatch.setattr(stats_module, "collect_second_moments", _no_pass)
    with pytest.raises(StatsCacheError, match=r"has 100 bytes free, the statistics need about 16,384"):
        layer_second_moments(tiny_llama(tok), tok, [1], MODULE, **_stats_args(tmp_path, corpus))
    monkeypatch.undo()
    path = tmp_path / "full" / "x.npz"

    def disk_full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(stats_module.np, "savez", disk_full)
    with pytest.raises(StatsCacheError, match=rf"cannot write the statistics file {path} .*No space left"):
        save_second_moment(path, SecondMoment(torch.eye(4), 3), 3, "float32", {})
    assert list(path.parent.iterdir()) == []
    assert shutil.disk_usage  # the real function is back


def _many_facts(path: Path, n: int) -> Path:
    facts = [{"prompt": f"fact {i} the capital of france is", "subject": "france"} for i in range(n)]
    path.write_text(json.dumps(facts), encoding="utf-8")
    return path


def test_too_many_facts_for_zerounlearn_refused_before_scoring(saved_tiny, tmp_path, monkeypatch, caplog):
    """Issue 29.5: 10,000 facts on d_out = 32 were refused after the scoring, with 'rank 10000 ... 31250%'."""
    from zerounlearn_editor.applications import unlearn

    root, _, hparams = saved_tiny

    def no_scoring(*_a, **_k):
        raise AssertionError("scored before the capacity check")

    monkeypatch.setattr(unlearn, "_measure", no_scoring)
    facts = _many_facts(tmp_path / "many.json", 10_000)
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn"]), "--save", "none", facts=facts) == 2
    assert "10000 requests at layer 1 (rank(M_f) <= min(n, d_out) = 32)" in caplog.text
    assert "rank(M_f) = 32 of the layer's d_out = 32" in caplog.text and "100%" in caplog.text
    assert "31250%" not in caplog.text


def test_no_progress_hides_the_scoring_bars(saved_tiny, monkeypatch):
    """Issue 29.5: --no-progress still printed the scoring bar."""
    from zerounlearn_editor.applications import unlearn
    from zerounlearn_editor.support.progress import progress_enabled

    root, _, hparams = saved_tiny
    seen = []
    original = unlearn._measure
    monkeypatch.setattr(unlearn, "_measure", lambda *a, **k: seen.append(progress_enabled()) or original(*a, **k))
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--save", "none") == 0
    assert seen and not any(seen)


@pytest.mark.parametrize(
    "content,match",
    [
        (
            '[{"prompt": "the capital of france is", "subject": "france", "target_new": ["rome", "berlin"]}]',
            r"facts.json: record 0: field 'target_new' must be a string .* got list",
        ),
        (
            '[{"prompt": "the capital of france is", "subject": "france", "target_new": {"str": "rome"}}]',
            r"facts.json: record 0: field 'target_new' must be a string .* got dict",
        ),
        (
            '[{"prompt": "the capital of france is", "subject": "france", "target_new": 5}]',
            r"facts.json: record 0: field 'target_new' must be a string .* got int 5",
        ),
        (
            '[{"prompt": "the capital of france is", "subject": "france", "subject": "paris"}]',
            r"facts.json: cannot parse facts to forget: duplicate key\(s\) \['subject'\]",
        ),
        (
            '[{"prompt": "the capital of france is", "subject": {"str": "france"}}]',
            r"record 0: field 'subject': must be a non-empty string",
        ),
    ],
)
def test_facts_file_values_that_would_be_read_in_part(content, match, tmp_path):
    """Issue 29.6: a list / {"str"} target was cut to its first value, a repeated key was last-wins, 5 failed late."""
    from zerounlearn_editor.applications.unlearn import load_facts
    from zerounlearn_editor.data.record_files import RecordFileError

    path = tmp_path / "facts.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RecordFileError, match=match):
        load_facts(path)


@pytest.mark.parametrize("suffix,content", [
    ("yaml", "- prompt: the capital of france is\n  subject: france\n  subject: paris\n"),
    ("jsonl", '{"prompt": "the capital of france is", "subject": "france", "subject": "paris"}\n'),
])
def test_facts_file_repeated_key_refused_in_every_format(suffix, content, tmp_path):
    from zerounlearn_editor.applications.unlearn import load_facts
    from zerounlearn_editor.data.record_files import RecordFileError

    path = tmp_path / f"facts.{suffix}"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RecordFileError, match=rf"{path.name}: .*duplicate key.*subject"):
        load_facts(path)


def test_request_list_field_with_several_values_is_refused(tok, tmp_path, corpus):
    """Issue 29.6: an EasyEdit request's list-valued field was cut to its first value."""
    from zerounlearn_editor.engine.requests import RequestError

    requests = [dict(forget_requests()[0], target_new=["rome", "berlin"])]
    _edit_must_fail(tiny_llama(tok), tok, requests, _hp(tmp_path, corpus), RequestError,
                    r"request 0: field 'target_new' is a list of 2 values", tmp_path / "stats")


def test_negative_ppl_tokens_refused(saved_tiny, capsys):
    """Issue 29.7: --ppl-tokens -5 was taken as 0."""
    from zerounlearn_editor.applications.unlearn import UnlearnSettings, run_unlearn

    root, _, hparams = saved_tiny
    with pytest.raises(SystemExit):
        _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn"]), "--save", "none", "--ppl-tokens", "-5")
    assert "must be >= 0, got -5" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"--ppl-tokens must be 0 \(no perplexity\) or an integer >= 2 .* got -5"):
        run_unlearn(hparams["ZeroUnlearn"], root / "facts.json", None, settings=UnlearnSettings(save="none",
                                                                                                 ppl_tokens=-5))



@pytest.mark.parametrize("kwargs, message", [
    ({"save": "disk"}, r"--save must be one of \('model', 'adapter', 'none'\), got 'disk'"),
    ({"ppl_tokens": 1.5}, r"--ppl-tokens must be 0 \(no perplexity\) or an integer >= 2 .* got 1.5"),
    ({"ppl_tokens": True}, r"--ppl-tokens must be 0 \(no perplexity\) or an integer >= 2 .* got True"),
    ({"fluency_guard": "ignore"}, r"fluency_guard must be one of \('refuse', 'warn', 'off'\) .* got 'ignore'"),
])
def test_unlearn_settings_checked_when_built(kwargs, message):
    """UnlearnSettings refuses a bad setting when it is built, before any file is read or model loaded."""
    from zerounlearn_editor.applications.unlearn import UnlearnSettings

    with pytest.raises(ValueError, match=message):
        UnlearnSettings(**kwargs)


def test_unlearn_settings_check_the_audit():
    from zerounlearn_editor.applications.unlearn import UnlearnSettings
    from zerounlearn_editor.evaluation.audit import AuditError, AuditSettings

    with pytest.raises(AuditError, match="unknown probe family 'nope'"):
        UnlearnSettings(audit=AuditSettings(families=("nope",)))
    assert UnlearnSettings(audit=AuditSettings()).audit == AuditSettings()


CHANGED_AFTER_LOADING = [
    ("layers", [], r"key 'layers' must list at least one layer"),
    ("layers", "12", r"key 'layers' has value '12', expected"),
    ("layers", None, r"key 'layers' has value None, expected"),
    ("layers", [2, 1], r"key 'layers' must be strictly increasing, got \[2, 1\]"),
    ("layers", [1, 1], r"key 'layers' must be strictly increasing, got \[1, 1\]"),
    ("v_num_grad_steps", "5", r"key 'v_num_grad_steps' has value '5', expected"),
    ("rewrite_module_tmp", "model.layers.1.mlp.down_proj", r"key 'rewrite_module_tmp' must contain '\{\}'"),
    ("fact_token", "first", r"key 'fact_token' has value 'first', expected"),
    ("v_lr", float("nan"), r"key 'v_lr' must be a finite number"),
]


@pytest.mark.parametrize(
    "key,value,match", CHANGED_AFTER_LOADING, ids=[f"{k}={v!r}" for k, v, _ in CHANGED_AFTER_LOADING]
)
def test_hparams_changed_after_loading_are_checked_at_edit_time(key, value, match, tok, tmp_path, corpus):
    """Issue 29.8: IndexError / TypeError / KeyError deep inside, or a silently wrong edit; the loader's checks now."""
    hp = _hp(tmp_path, corpus)
    setattr(hp, key, value)
    _edit_must_fail(tiny_llama(tok), tok, forget_requests(), hp, HParamsError, match, tmp_path / "stats")
    from zerounlearn_editor import apply_zerounlearn_gd_to_model

    gd = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD"))
    setattr(gd, key, value)
    with pytest.raises(HParamsError, match=match):
        apply_zerounlearn_gd_to_model(tiny_llama(tok), tok, forget_requests(), gd, progress=False)


def test_model_name_may_hold_easyedits_in_memory_pair(tok, tmp_path, corpus):
    """The edit-time check accepts EasyEdit's ``hparams.model_name = (model, tok)``; other non-strings stay errors."""
    from zerounlearn_editor import apply_zerounlearn_gd_to_model

    model = tiny_llama(tok)
    gd = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD",
                                                              v_num_grad_steps=2))
    gd.model_name = (model, tok)
    before = model.model.layers[gd.layers[0]].mlp.down_proj.weight.detach().clone()
    apply_zerounlearn_gd_to_model(model, tok, forget_requests(), gd, progress=False)
    assert not torch.equal(before, model.model.layers[gd.layers[0]].mlp.down_proj.weight)
    gd.model_name = (model, tok, "extra")
    with pytest.raises(HParamsError, match="'model_name'"):
        apply_zerounlearn_gd_to_model(tiny_llama(tok), tok, forget_requests(), gd, progress=False)


def test_retain_set_holding_a_forgotten_prompt_is_refused(tok, tmp_path, corpus):
    """Issue 29.9: a retain set with a forget prompt ran a contradictory edit without a word."""
    from zerounlearn_editor.engine.requests import RequestError

    hp = ZeroUnlearnGDHyperParams.from_dict(
        tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD", retain_nullspace_weight=1.0),
        source="tiny.yaml",
    )
    retain = [{"prompt": "the capital of italy is", "subject": "italy"},
              {"prompt": "the capital of  germany is", "subject": "germany"}]
    from zerounlearn_editor import apply_zerounlearn_gd_to_model as apply_zerounlearn_to_model

    model = tiny_llama(tok)
    digest = ModelFingerprint.of(model)
    with pytest.raises(RequestError, match=r"retain request 1: prompt .* is also forget request 1"):
        apply_zerounlearn_to_model(model, tok, forget_requests(), hp, retain=retain, progress=False)
    assert digest.differences(model) == []


def test_model_on_the_meta_device_is_refused(tok, tmp_path, corpus):
    """Issue 29.10: NotImplementedError: Cannot copy out of meta tensor."""
    from zerounlearn_editor import apply_zerounlearn_to_model

    with torch.device("meta"):
        model = tiny_llama(tok)
    with pytest.raises(ValueError, match=r"tensor\(s\) on the meta device .*weights were never loaded"):
        apply_zerounlearn_to_model(model, tok, forget_requests(), _hp(tmp_path, corpus), progress=False)
    assert not (tmp_path / "stats").exists()  # before the statistics


def test_bench_lookup_from_a_variant_yaml_finds_the_plain_baseline_files():
    """Issue 29.11: --hparams ...-retain.yaml looked for hparams/GA/SmolLM2-135M-Instruct-retain.yaml."""
    from zerounlearn_editor.harness.method_specs import HParamsLookup
    from zerounlearn_editor.support.resources import hparams_path

    main = hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct-retain")
    lookup = HParamsLookup(main, ZeroUnlearnGDHyperParams.from_hparams(main))
    assert lookup.path_for("GA").resolve() == hparams_path("GA", "SmolLM2-135M-Instruct").resolve()
    assert lookup.path_for("GA-full", folder="GA", variant="-full").name == "SmolLM2-135M-Instruct-full.yaml"
    # a method without the variant file falls back to the plain stem
    assert lookup.path_for("ZeroUnlearn").resolve() == hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct").resolve()
    assert lookup.path_for("ZeroUnlearn-GD") == main


def test_adapter_refuses_another_base_model_of_the_same_shape(tok, tmp_path, corpus):
    """Issue 29.13: PEFT applies an adapter to any model of the same shape."""
    pytest.importorskip("peft")
    from zerounlearn_editor import apply_zerounlearn_gd_to_model
    from zerounlearn_editor.integrations.adapters import AdapterBaseError, export_lora_adapter, load_lora_adapter

    hp = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD",
                                                              v_num_grad_steps=3))
    model = tiny_llama(tok)
    edited, weights_copy = apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, copy=True,
                                                         return_orig_weights=True, progress=False)
    report = export_lora_adapter(weights_copy, edited, tmp_path / "adapter")
    recorded = json.loads((tmp_path / "adapter" / "zerounlearn_adapter.json").read_text())["base_model_fingerprint"]
    assert recorded == report.base_model_fingerprint
    with pytest.raises(AdapterBaseError, match=r"adapter.*made for the model with fingerprint"):
        load_lora_adapter(tiny_llama(tok, seed=1), tmp_path / "adapter")
    with pytest.raises(AdapterBaseError):  # the edited model is not the adapter's base either
        load_lora_adapter(edited, tmp_path / "adapter")
    adapted = load_lora_adapter(model, tmp_path / "adapter")
    batch = tok(["the capital of france is"], return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(adapted(**batch).logits, edited(**batch).logits, atol=1e-4)


def test_kill_9_during_save_leaves_no_half_folder_and_the_next_run_cleans_up(saved_tiny):
    """Issue 29.4: kill -9 during --save left a half-written --out and a hidden temp file no run removed."""
    import signal
    import subprocess
    import sys

    root, _, hparams = saved_tiny
    out = root / "out-kill9"
    script = (
        "import os, signal, sys\n"
        "from zerounlearn_editor.applications import unlearn\n"
        "def killed_while_writing(weights, model, out, **kwargs):\n"
        "    (out / 'adapter_model.safetensors').write_bytes(b'0' * 4096)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "unlearn.export_lora_adapter = killed_while_writing\n"
        "from zerounlearn_editor.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = ["unlearn", "--facts", str(root / "facts.json"), "--ppl-tokens", "0", "--no-progress",
            "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out)]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert not out.exists()  # no half-written folder
    temps = [p for p in root.iterdir() if p.name.startswith(".out-kill9.zerounlearn-tmp-")]
    assert len(temps) == 1 and (temps[0] / "adapter_model.safetensors").is_file()
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out)) == 0
    assert not temps[0].exists()
    assert (out / "unlearn_report.json").is_file() and (out / "adapter_config.json").is_file()


def test_gpt2_prompt_that_fits_only_without_the_fewshot_prefixes(tok, tmp_path, corpus):
    """The few-shot context prefixes (``fewshot_contexts``) count in the length check (the request is named before any
    work)."""
    from zerounlearn_editor.engine.contexts import fewshot_prefixes
    from zerounlearn_editor.engine.requests import RequestError, normalize_requests

    requests = forget_requests()
    longest = max(len(tok(p)["input_ids"]) for p in fewshot_prefixes(normalize_requests(requests), 4))
    plain = _hp(tmp_path, corpus, gpt2=True)
    room = 128 - (plain.context_template_length + 1) - 2  # the target takes a token or two
    assert longest > plain.context_template_length + 8
    requests[1] = dict(requests[1], prompt="the old city " * ((room - 8) // 3) + "the capital of germany is")
    assert len(tok(requests[1]["prompt"])["input_ids"]) + longest > 128
    hp = _hp(tmp_path, corpus, gpt2=True, fewshot_contexts=4)
    _edit_must_fail(tiny_gpt2(tok), tok, requests, hp, RequestError,
                    r"request 1: prompt .* needs \d+ positions .* more than the model's 128", tmp_path / "stats")


# --------------------------------------------------------------------------- issue 36.12: deep YAML, few-shot facts

A_FACT = {"prompt": "The letter after z is a", "subject": "a", "ground_truth": "b"}
"""Subject ``"a"`` occurs in every built-in few-shot fact's text: a deep YAML has no few-shot fact left."""
FEWSHOT_ERROR = (
    r"fewshot_contexts: only [0-2] of the \d+ built-in few-shot facts name no forgotten subject "
    r"or answer, 3 are needed; request 2 \(subject 'a', answer 'b'\) rules out \d+\. "
    r"Give those facts their full subject and answer, edit them in another call, or use a YAML without "
    r"fewshot_contexts"
)


def test_deep_yaml_without_fewshot_facts_fails_before_statistics_on_any_model(tok, tmp_path, corpus):
    """Issue 36.12: a rotary model (no position limit) found it only after the statistics, naming no fact."""
    requests = forget_requests()[:2] + [A_FACT]
    hp = _hp(tmp_path, corpus, fewshot_contexts=2)
    _edit_must_fail(tiny_llama(tok), tok, requests, hp, ValueError, FEWSHOT_ERROR, tmp_path / "stats")
    assert not (tmp_path / "stats").exists()


def test_unlearn_deep_yaml_without_fewshot_facts_fails_before_loading(saved_tiny, tmp_path, monkeypatch, caplog):
    """Issue 36.12: ``unlearn`` loaded the model, scored the facts and cached statistics first."""
    root, model_dir, hparams = saved_tiny
    config = yaml.safe_load(hparams["ZeroUnlearn-GD"].read_text())
    config["fewshot_contexts"] = 2
    deep = tmp_path / "deep.yaml"
    deep.write_text(yaml.safe_dump(config), encoding="utf-8")
    facts = json.loads((root / "facts.json").read_text())[:2] + [
        {"prompt": A_FACT["prompt"], "subject": "a", "answer": "b"}]
    (tmp_path / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    stats = _files(root / "stats")
    _no_model_load(monkeypatch)
    assert _unlearn(saved_tiny, "--hparams", str(deep), "--save", "none", facts=tmp_path / "facts.json") == 2
    assert re.search(FEWSHOT_ERROR, caplog.text), caplog.text
    assert _files(root / "stats") == stats


# --------------------------------------------------------------------------- issue 36.15: empty list options

_H = ["--hparams", "H"]


@pytest.mark.parametrize("argv,option", [
    (["audit", *_H, "--data", "d", "--out", "o", "--quant", ""], "--quant"),  # dropped the quantization columns
    (["audit", *_H, "--data", "d", "--out", "o", "--relearn-scopes", " , "], "--relearn-scopes"),
    (["audit", *_H, "--data", "d", "--out", "o", "--probes", ""], "--probes"),
    (["audit", *_H, "--data", "d", "--out", "o", "--methods", ""], "--methods"),
    (["audit", *_H, "--data", "d", "--out", "o", "--seeds", ""], "--seeds"),
    (["unlearn", *_H, "--facts", "f", "--audit", "--audit-quant", ""], "--audit-quant"),
    (["bench", *_H, "--data", "d", "--out", "o", "--methods", ""], "--methods"),  # ran the default methods
    (["bench-speed", "--layers", ""], "--layers"),  # edited the YAML's layers
    (["bench-speed", "--targets-optimizers", ","], "--targets-optimizers"),  # ran without the comparison
    (["bench-speed", "--pipeline", ""], "--pipeline"),
    (["bench-speed", "--n", ""], "--n"),
    (["plot", "s.json", "--methods", ""], "--methods"),  # plotted every method
    (["plot", "s.json", "--seeds", ""], "--seeds"),  # averaged over every seed
    (["utility", *_H, "--out", "o", "--method", ""], "--method"),
    (["utility", *_H, "--out", "o", "--tasks", ""], "--tasks"),
    (["init-hparams", "--method", "ZeroUnlearn", "--model", "m", "--layers", ""], "--layers"),
])
def test_cli_empty_list_option_is_an_error(argv, option, capsys):
    """Issue 36.15: an empty comma-list option was read as "nothing" (a dropped column) or as its default."""
    from zerounlearn_editor.cli import main as cli_main

    with pytest.raises(SystemExit) as info:
        cli_main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {option}: empty value" in err, err
    assert "give a comma list, or leave the option out for its default" in err


# --------------------------------------------------------------------------- issue 36: silent results, late errors


def test_out_that_is_a_link_to_a_folder_is_written_through(saved_tiny, tmp_path, caplog):
    """Issue 36.5: the link was replaced by a real folder, the target stayed empty, a hidden ``-old`` link stayed
    behind and later runs logged "removed" what they had not removed."""
    root, _, hparams = saved_tiny
    target = tmp_path / "real-out"
    target.mkdir()
    link = tmp_path / "out-link"
    link.symlink_to(target, target_is_directory=True)
    for save in ("adapter", "none"):
        caplog.clear()
        # the second run replaces the first run's ledger (refused without --replace-ledger: issue 46.7)
        assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(link), "--save", save,
                        "--replace-ledger") == 0
        assert link.is_symlink() and Path(os.readlink(link)) == target  # the link is left as it was
        assert (target / "unlearn_report.json").is_file()  # the run's files are in the link's target
        assert ("adapter_config.json" in {p.name for p in target.iterdir()}) == (save == "adapter")
        assert not [p for p in tmp_path.iterdir() if ".zerounlearn-tmp-" in p.name]  # no hidden leftovers
        assert "removed" not in caplog.text


def test_stale_temporary_link_is_removed_and_the_log_tells_the_truth(tmp_path, caplog):
    """Issue 36.5: a leftover ``.NAME.zerounlearn-tmp-...`` link survived every later run, each logging "removed"."""
    import subprocess
    import sys

    from zerounlearn_editor.support import output_dir

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep", encoding="utf-8")
    stale = tmp_path / f".out{output_dir.TEMP_TAG}{output_dir._host()}-{dead.pid}-abcd-old"
    stale.symlink_to(elsewhere, target_is_directory=True)
    with caplog.at_level(logging.WARNING), output_dir.staged_output_dir(tmp_path / "out") as staging:
        (staging / "x.txt").write_text("x", encoding="utf-8")
    assert not stale.is_symlink() and (elsewhere / "keep.txt").is_file()  # the link is gone, not what it points to
    assert f"removed {stale}" in caplog.text
    assert (tmp_path / "out" / "x.txt").is_file()


def test_fluency_refusal_on_the_command_line_names_the_cli_option(saved_tiny, monkeypatch, caplog):
    """Issue 36.16: ``zerounlearn unlearn`` told the user to pass ``fluency_guard='warn'`` (an API argument)."""
    from zerounlearn_editor.engine import pipeline

    root, _, hparams = saved_tiny
    readings = iter([10.0, 100.0] * 4)  # the guard text's perplexity before and after: +900%
    monkeypatch.setattr(pipeline, "guard_perplexity", lambda *_a, **_k: next(readings))
    out = root / "out-fluency"
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out)) == 2
    assert "edit refused and the weights restored" in caplog.text and "+900.0%" in caplog.text
    assert "--allow-fluency-loss keeps such an edit" in caplog.text and "fluency_guard=" not in caplog.text
    assert not out.exists()
    caplog.clear()
    assert (
        _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(out), "--allow-fluency-loss")
        == 0
    )
    assert "kept because fluency_guard is 'warn'" in caplog.text


def test_targets_left_far_above_the_stop_value_are_named(tmp_path, caplog):
    """Issue 36.6: ``v_num_grad_steps: 0`` "succeeded" without moving the targets (loss ~12), with no warning."""
    from arch_zoo import FORGET, trained_model, write_c0_corpus
    from zerounlearn_editor import EditReport, apply_zerounlearn_gd_to_model
    from zerounlearn_editor.engine.targets import far_above_stop

    assert far_above_stop(torch.tensor([0.04, 0.49, 0.51, 2.29, 2.31, float("nan")]), 0.05) == [4, 5]
    assert far_above_stop(torch.tensor([0.04, 0.49, 0.51, 2.29, 2.31]), 0.5) == []  # 10 x 0.5 = 5 nats
    requests = [{"prompt": p, "subject": s, "ground_truth": a} for p, s, a in FORGET]
    corpus = write_c0_corpus(tmp_path / "c0.jsonl")
    reached = dict(v_lr=0.5, v_weight_decay=1e-3, clamp_norm_factor=4.0, v_num_grad_steps=50)
    for steps, expected in ((reached, []), (dict(v_num_grad_steps=0), [0, 1])):
        model, tok = trained_model("llama")
        hp = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD",
                                                                  **steps))
        report = EditReport()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False, report=report, fluency_guard="off")
        assert report.unreached_targets == expected, report.target_nll
        far = [r.getMessage() for r in caplog.records if "far above the stop value" in r.getMessage()]
        if expected:
            assert len(far) == 1 and "2 of 2 request(s)" in far[0] and "request 0 (" in far[0]
            assert "after 0 steps" in far[0] and "v_num_grad_steps (now 0)" in far[0]
        else:
            assert not far and max(report.target_nll) < hp.v_early_stop_loss


def test_target_that_is_the_answer_is_refused_in_every_entry_point(tok, tmp_path, corpus, saved_tiny, monkeypatch,
                                                                     caplog):
    """Issue 36.1: ``target_new: " Paris"`` for the answer ``Paris`` (or a YAML ``neutral_target`` equal to an answer)
    was "forgotten" by teaching it: rc 0, no warning, p(Paris) 0.773 -> 0.981."""
    from zerounlearn_editor import RequestError, apply_zerounlearn_gd_to_model, apply_zerounlearn_to_model
    from zerounlearn_editor.engine.pipeline import neutral_targets
    from zerounlearn_editor.engine.requests import target_repeats_answer

    assert target_repeats_answer(" Paris", "Paris") and target_repeats_answer("paris, france", " Paris")
    assert not target_repeats_answer(" I don't know", "Paris") and not target_repeats_answer("Par", "Paris")
    for apply, gd in ((apply_zerounlearn_gd_to_model, True), (apply_zerounlearn_to_model, False)):
        cls = ZeroUnlearnGDHyperParams if gd else ZeroUnlearnHyperParams
        alg = "ZeroUnlearn-GD" if gd else "ZeroUnlearn"
        hp = cls.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name=alg, v_num_grad_steps=2))
        requests = forget_requests()
        requests[1] = dict(requests[1], target_new=" Berlin, of course")
        model = tiny_llama(tok)
        before = _digest_model(model)
        with pytest.raises(RequestError, match=r"request 1: the neutral target ' Berlin, of course' \(its field "
                                               r"'target_new'\) is or begins with the answer 'berlin' to forget"):
            apply(model, tok, requests, hp, progress=False)
        with pytest.raises(RequestError, match="request 1: .*is or begins with the answer"):
            neutral_targets(model, tok, requests, hp)
        answer_yaml = hp.replace(neutral_target="Tokyo")  # the YAML's target, used by request 2 (no target_new)
        with pytest.raises(RequestError, match=r"request 2: the neutral target 'Tokyo' \(the hparams' key "
                                               r"'neutral_target'\) is or begins with the answer 'tokyo'"):
            apply(model, tok, forget_requests(), answer_yaml, progress=False)
        assert _digest_model(model) == before
    # zerounlearn unlearn: refused before the model loads, naming the file and record
    root, _, hparams = saved_tiny
    facts = tmp_path / "teach.json"
    facts.write_text(json.dumps([{"prompt": "the capital of france is", "subject": "france", "answer": "paris",
                                  "target_new": " paris"}]), encoding="utf-8")
    _no_model_load(monkeypatch)
    assert _unlearn(saved_tiny, "--hparams", str(hparams["ZeroUnlearn-GD"]), "--out", str(tmp_path / "o"),
                    facts=facts) == 2
    assert (
        f"{facts}: record 0: the neutral target ' paris' (its field 'target_new') is or begins with the answer"
        in caplog.text
    )
    assert not (tmp_path / "o").exists()


def _digest_model(model) -> str:
    h = hashlib.sha256()
    for key, p in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_facts_still_answered_after_the_edit_are_listed_not_forgotten(tmp_path, capsys):
    """Issue 36.1: a fact the edit left answered was listed under "Forgotten facts"; ``EditReport`` and the
    ``unlearn`` report now count and list the facts still answered."""
    from arch_zoo import FACTS, FORGET, trained_model, write_c0_corpus
    from zerounlearn_editor import EditReport, apply_zerounlearn_gd_to_model
    from zerounlearn_editor.applications.unlearn import REPORT_NAME
    from zerounlearn_editor.cli import main

    requests = [{"prompt": p, "subject": s, "ground_truth": a} for p, s, a in FORGET]
    requests.append({"prompt": FACTS[2][0], "subject": FACTS[2][1]})  # no answer: not scored
    corpus = write_c0_corpus(tmp_path / "c0.jsonl")
    reached = dict(v_lr=0.5, v_weight_decay=1e-3, clamp_norm_factor=4.0, v_num_grad_steps=50)
    for settings, expected in ((reached, []), (dict(v_num_grad_steps=0), [0, 1])):
        model, tok = trained_model("llama")
        hp = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD",
                                                                  **settings))
        report = EditReport()
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False, report=report, fluency_guard="off")
        assert report.still_answered == expected

    model, tok = trained_model("llama")
    folder = tmp_path / "trained"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD", model_name=str(folder),
                               v_num_grad_steps=0, fluency_max_increase=None)
    (tmp_path / "hp.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps([{"prompt": p, "subject": s, "answer": a} for p, s, a in FORGET]
                                + [{"prompt": FACTS[2][0], "subject": FACTS[2][1]}]), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["unlearn", "--hparams", str(tmp_path / "hp.yaml"), "--facts", str(facts), "--out", str(out),
                 "--save", "none", "--ppl-tokens", "0", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert ("Forgotten: 0 of 2 fact(s) the model answered before the edit; still answered after the edit (NOT "
            "forgotten): 2; no answer given (not scored): 1") in printed
    assert "### Still answered after the edit (2 of 2): NOT forgotten" in printed
    assert "### Forgotten facts" not in printed and "### Edited facts without an answer (not scored)" in printed
    saved = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    assert saved["still_answered"] == [0, 1] and len(saved["forgotten"]) == 3


def test_answer_check_can_be_turned_off_for_timing(tok, tmp_path, corpus):
    """The speed bench times the method alone: ``answer_check=False`` skips the scoring after the edit."""
    from zerounlearn_editor import EditReport, apply_zerounlearn_gd_to_model

    hp = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD",
                                                              v_num_grad_steps=2))
    for check in (True, False):
        report = EditReport()
        apply_zerounlearn_gd_to_model(tiny_llama(tok), tok, forget_requests(), hp, progress=False, report=report,
                                      answer_check=check)
        assert ("answered" in report.timings) == check
