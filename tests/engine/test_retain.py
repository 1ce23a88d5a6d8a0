"""Retain-aware mode: the retain set reaches the solve, protects what it names, and is opt-in."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tiny_models import forget_requests, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
)
from zerounlearn_editor.engine.contexts import CONTEXT_SEED, context_prefixes
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.engine.requests import RequestError
from zerounlearn_editor.engine.retain import load_retain_file, normalize_retain
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis, protected_covariance
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

RETAIN = [
    {"prompt": "the capital of england is", "subject": "england"},
    {"prompt": "the capital of egypt is", "subject": "egypt"},
    {"prompt": "the capital of russia is", "subject": "russia"},
    {"prompt": "the capital of italy is", "subject": "italy"},
]
LAYER = 2
MODULE = f"model.layers.{LAYER}.mlp.down_proj"


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def setup(tok, tmp_path_factory):
    """A tiny Llama, its C0 and neutral targets for :func:`forget_requests` (edited layer 2 only)."""
    tmp = tmp_path_factory.mktemp("retain")
    paths = (tmp / "stats", write_corpus(tmp / "corpus.jsonl"))
    model = tiny_llama(tok)
    hp = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(*paths, alg_name="ZeroUnlearn-GD", layers=[LAYER]))
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    targets = neutral_targets(model, tok, forget_requests(), hp)
    return model, paths, moments, targets


def _hp(paths, alg="ZeroUnlearn-GD", **overrides):
    cls = ZeroUnlearnGDHyperParams if alg == "ZeroUnlearn-GD" else ZeroUnlearnHyperParams
    return cls.from_dict(tiny_hparams_dict(*paths, alg_name=alg, layers=[LAYER], **overrides))


def _retain_keys(model, tok, hp) -> torch.Tensor:
    prefixes = context_prefixes(model, tok, hp.context_template_count, hp.context_template_length, CONTEXT_SEED)
    readout = read_keys_and_hidden(
        model, tok, normalize_retain(RETAIN), prefixes, MODULE, MODULE.rsplit(".", 2)[0], "subject_last", 8
    )
    return readout.keys.double()


def _edit(setup, tok, hp, apply=apply_zerounlearn_gd_to_model, **kwargs):
    model, _, moments, targets = setup
    edited, _ = apply(
        model, tok, forget_requests(), hp, copy=True, second_moments=moments, targets=targets, progress=False, **kwargs
    )
    return edited


def _retain_change(model, edited, K_r) -> float:
    """Largest relative change of a retain value ``W k_r`` ``[d_out]`` over the retain keys."""
    W0 = get_weight_matrix(get_module(model, MODULE)).detach().double()
    W1 = get_weight_matrix(get_module(edited, MODULE)).detach().double()
    return float(((W1 - W0) @ K_r).norm(dim=0).div((W0 @ K_r).norm(dim=0)).max())


def test_gd_retain_keyword_protects_the_retain_values(setup, tok):
    """Retain keys in the protected covariance: their outputs move < 1e-2 of their size, and
    at least 10x less than the same edit without the retain set."""
    model, paths, _, _ = setup
    K_r = _retain_keys(model, tok, _hp(paths))
    plain = _retain_change(model, _edit(setup, tok, _hp(paths, nullspace_threshold=1e-2)), K_r)
    hp = _hp(paths, nullspace_threshold=1e-2, retain_nullspace_weight=1e4)
    kept = _retain_change(model, _edit(setup, tok, hp, retain=RETAIN), K_r)
    assert plain > 1e-2
    assert kept < 1e-2 and kept < plain / 10


def test_retain_file_in_the_yaml_equals_the_keyword(setup, tok, tmp_path):
    """``retain_file`` (relative to the YAML's folder) reaches the solve like ``retain=``."""
    _, paths, _, _ = setup
    (tmp_path / "keep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RETAIN), encoding="utf-8")
    config = tiny_hparams_dict(*paths, alg_name="ZeroUnlearn-GD", layers=[LAYER], retain_nullspace_weight=1e4,
                               nullspace_threshold=1e-2,
                               retain_file="keep.jsonl")
    yaml_path = tmp_path / "hp.json"
    yaml_path.write_text(json.dumps(config), encoding="utf-8")
    from_file = ZeroUnlearnGDHyperParams.from_hparams(yaml_path)
    assert Path(from_file.retain_file) == tmp_path / "keep.jsonl"
    by_file = _edit(setup, tok, from_file)
    by_keyword = _edit(setup, tok, _hp(paths, retain_nullspace_weight=1e4, nullspace_threshold=1e-2), retain=RETAIN)
    without = _edit(setup, tok, _hp(paths, retain_nullspace_weight=1e4, nullspace_threshold=1e-2))
    w = lambda m: get_weight_matrix(get_module(m, MODULE))  # noqa: E731
    assert torch.equal(w(by_file), w(by_keyword))
    assert not torch.equal(w(by_file), w(without))


def test_a_retain_set_with_paper_weights_is_refused_and_nothing_changes(setup, tok):
    model, paths, _, _ = setup
    before = get_weight_matrix(get_module(model, MODULE)).clone()
    for alg, apply in (("ZeroUnlearn", apply_zerounlearn_to_model), ("ZeroUnlearn-GD", apply_zerounlearn_gd_to_model)):
        with pytest.raises(ValueError, match="retain weights .* are all 0"):
            apply(model, tok, forget_requests(), _hp(paths, alg), retain=RETAIN, progress=False)
    assert torch.equal(get_weight_matrix(get_module(model, MODULE)), before)


def test_a_retain_free_weight_alone_does_not_take_a_retain_set(setup, tok, caplog):
    """context_nullspace_weight (relation-context protection) uses no retain set: a retain set is refused, not
    silently ignored, and without one no 'retain terms have no effect' warning is logged."""
    model, paths, _, _ = setup
    before = get_weight_matrix(get_module(model, MODULE)).clone()
    hp = _hp(paths, context_nullspace_weight=1.0)
    with pytest.raises(ValueError, match="retain weights .* are all 0"):
        apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, retain=RETAIN, progress=False)
    assert torch.equal(get_weight_matrix(get_module(model, MODULE)), before)
    with caplog.at_level("WARNING"):
        apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, copy=True, progress=False)
    assert "no retain set was given" not in caplog.text
    with caplog.at_level("WARNING"):
        apply_zerounlearn_gd_to_model(model, tok, forget_requests(), _hp(paths, retain_nullspace_weight=1.0),
                                      copy=True, progress=False)
    assert "retain_nullspace_weight set but no retain set was given" in caplog.text


@pytest.mark.parametrize("text_weight", [None, 100.0])
def test_a_retain_weight_without_a_retain_set_leaves_the_edit_bit_for_bit(setup, tok, text_weight):
    """A retain-aware file used without a retain set (gemma-3-270m-many.yaml, RESULTS 12.29) edits exactly as the
    same file with the weight 0: the null space is taken of ``C0`` itself, with the paper's penalty or the text
    weight."""
    model, paths, _, _ = setup
    before = get_weight_matrix(get_module(model, MODULE)).clone()

    def edited(weight, **kwargs):
        hp = _hp(paths, retain_nullspace_weight=weight, nullspace_text_weight=text_weight, nullspace_threshold=1e-2)
        return get_weight_matrix(get_module(_edit(setup, tok, hp, **kwargs), MODULE))

    plain = edited(0.0)
    assert not torch.equal(plain, before)
    for weight in (0.1, 1e4):
        assert torch.equal(edited(weight), plain), weight
    assert not torch.equal(edited(1e4, retain=RETAIN), plain)  # the check can fail: given a retain set, it moves


@pytest.mark.parametrize(
    "retain, fragment",
    [
        (
            [{"prompt": "the capital of england is", "subject": "france"}],
            "retain request 0: subject 'france' does not occur",
        ),
        ([RETAIN[0], {"subject": "egypt"}], "retain request 1: missing field 'prompt'"),
        (
            [{"prompt": "the capital of egypt is", "subject": "egypt", "target_new": "paris"}],
            "retain request 0: field 'target_new'",
        ),
    ],
)
def test_bad_retain_requests_name_the_retain_request(setup, tok, retain, fragment):
    model, paths, _, _ = setup
    before = get_weight_matrix(get_module(model, MODULE)).clone()
    with pytest.raises(RequestError, match=fragment):
        apply_zerounlearn_gd_to_model(
            model, tok, forget_requests(), _hp(paths, retain_nullspace_weight=1.0), retain=retain
        )
    assert torch.equal(get_weight_matrix(get_module(model, MODULE)), before)


def test_retain_file_errors_name_file_and_record(tmp_path):
    path = tmp_path / "keep.yaml"
    path.write_text("- prompt: the capital of egypt is\n  subject: egypt\n- prompt: x\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"keep.yaml: record 1: field 'subject': missing"):
        load_retain_file(path)


@pytest.mark.parametrize("key", ["retain_nullspace_weight"])
def test_retain_weights_are_validated(tmp_path, key):
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(HParamsError, match=key):
            ZeroUnlearnGDHyperParams.from_dict(
                tiny_hparams_dict(tmp_path, tmp_path / "c.jsonl", alg_name="ZeroUnlearn-GD", **{key: bad})
            )


# ---- the maths, without a model -------------------------------------------------------------


def test_protected_covariance_moves_the_null_space_off_the_retain_keys():
    torch.manual_seed(2)
    d_in = 16
    basis = torch.linalg.qr(torch.randn(d_in, d_in, dtype=torch.float64))[0]
    C0 = basis[:, :8] @ basis[:, :8].T  # rank 8: null space = the other 8 directions
    K_r = basis[:, 8:10] @ torch.randn(2, 5, dtype=torch.float64)  # retain keys inside C0's null space
    assert protected_covariance(C0, K_r, 0.0) is C0
    U0, _ = nullspace_basis(C0, 1e-6)
    assert (U0.T @ K_r).norm() > 0.5 * K_r.norm()
    U0r, _ = nullspace_basis(protected_covariance(C0, K_r, 1.0), 1e-6)
    assert U0r.shape[1] == 6 and (U0r.T @ K_r).norm() < 1e-8 * K_r.norm()
    with pytest.raises(ValueError, match="K_r must have shape"):
        protected_covariance(C0, torch.ones(3, 2, dtype=torch.float64), 1.0)


