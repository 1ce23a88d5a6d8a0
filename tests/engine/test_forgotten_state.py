"""Lifelong unlearning's carried state (:mod:`zerounlearn_editor.engine.forgotten_state`) and its protection in
the ZeroUnlearn-GD solve: pure maths on small tensors, the state file, the state on a model object."""
from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Optional

import pytest
import torch
import yaml

import zerounlearn_editor.methods.zerounlearn_gd.method as method_module
from tiny_models import forget_requests, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams, apply_zerounlearn_gd_to_model
from zerounlearn_editor.engine.forgotten_state import (
    ForgottenState,
    ForgottenStateError,
    add_keys,
    attach_state,
    edited_weights_digest,
    empty_state,
    key_moment,
    load_state,
    merge_states,
    model_state,
    save_state,
    undo_to,
)
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis, protected_covariance, solve_exact
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

F64 = torch.float64


def _problem(seed: int = 0, d_out: int = 12, d_in: int = 40, rank_c0: int = 20, n_prev: int = 6, n: int = 4):
    """A layer whose ``C0`` has a 20-dimensional null space that earlier and new forget keys both reach."""
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(d_in, rank_c0, generator=g, dtype=F64)
    C0 = B @ B.T / rank_c0
    W = torch.randn(d_out, d_in, generator=g, dtype=F64)
    K_prev = torch.randn(d_in, n_prev, generator=g, dtype=F64)
    K_f = torch.randn(d_in, n, generator=g, dtype=F64)
    M_n = torch.randn(d_out, n, generator=g, dtype=F64)
    return W, C0, K_prev, K_f, M_n


def _update(W, C0, K_f, M_n, S_prev=None, weight=0.0, threshold=1e-6):
    U0, _ = nullspace_basis(protected_covariance(C0, None, 0.0, S_prev=S_prev, forgotten_weight=weight), threshold)
    return solve_exact(W, K_f, W @ K_f, M_n, U0, a=1.0, b=100.0, c=0.1), U0.shape[1]


def test_protection_keeps_the_values_of_earlier_forget_keys():
    W, C0, K_prev, K_f, M_n = _problem()
    D_free, r_free = _update(W, C0, K_f, M_n)
    D_prot, r_prot = _update(W, C0, K_f, M_n, key_moment(K_prev), weight=1.0)
    assert r_free == 20 and r_prot == 20 - K_prev.shape[1]  # the earlier keys' directions leave the null space
    moved_free = float((D_free @ K_prev).norm())
    moved_prot = float((D_prot @ K_prev).norm())
    assert moved_free > 1e-1 * float((W @ K_prev).norm())  # without protection round k moves round 1's values
    assert moved_prot < 1e-8 * moved_free
    # the new facts still reach their targets about as well
    before = float((W @ K_f - M_n).norm())
    assert float(((W + D_prot) @ K_f - M_n).norm()) < 0.2 * before
    # and utility keys (range of C0) are untouched either way
    assert float((D_prot @ C0).norm()) < 1e-8 * float(D_prot.norm())


def test_protection_grows_with_the_weight_and_is_absent_at_zero():
    W, C0, K_prev, K_f, M_n = _problem(seed=1)
    S = key_moment(K_prev)
    assert protected_covariance(C0, None, 0.0, S_prev=S, forgotten_weight=0.0) is C0  # the paper's path, same object
    D0, _ = _update(W, C0, K_f, M_n)
    D_zero, _ = _update(W, C0, K_f, M_n, S, weight=0.0)
    assert torch.equal(D0, D_zero)
    moved = [
        float((_update(W, C0, K_f, M_n, S, weight=w, threshold=1e-2)[0] @ K_prev).norm()) for w in (1e-4, 1e-2, 1.0)
    ]
    assert moved[0] > moved[1] > moved[2]


def test_protected_covariance_rejects_bad_state():
    C0 = torch.eye(4, dtype=F64)
    with pytest.raises(ValueError, match="S_prev must have shape"):
        protected_covariance(C0, None, 0.0, S_prev=torch.eye(3, dtype=F64), forgotten_weight=1.0)
    with pytest.raises(ValueError, match="forgotten-facts protection weight"):
        protected_covariance(C0, None, 0.0, S_prev=torch.eye(4, dtype=F64), forgotten_weight=-1.0)


def test_state_update_merge_and_file_round_trip(tmp_path: Path):
    g = torch.Generator().manual_seed(3)
    K1, K2 = torch.randn(8, 3, generator=g, dtype=F64), torch.randn(8, 2, generator=g, dtype=F64)
    state = empty_state("m.{}.w", (1, 2), {1: 8, 2: 8})
    one = add_keys(state, {1: key_moment(K1), 2: key_moment(2 * K1)}, 3)
    two = add_keys(one, {1: key_moment(K2), 2: key_moment(2 * K2)}, 2, weights_digest="abc")
    K = torch.cat([K1, K2], dim=1)
    assert two.count == 5 and torch.allclose(two.moments[1], K @ K.T) and torch.allclose(two.moments[2], 4 * K @ K.T)
    assert state.count == 0 and float(state.moments[1].abs().max()) == 0  # pure: the input state is unchanged
    merged = merge_states(one, add_keys(state, {1: key_moment(K2), 2: key_moment(2 * K2)}, 2))
    assert merged.count == 5 and torch.allclose(merged.moments[1], two.moments[1])
    path, sha = save_state(two, tmp_path)
    back = load_state(path, sha)
    assert (back.module_tmp, back.layers, back.count, back.weights_digest) == ("m.{}.w", (1, 2), 5, "abc")
    assert all(torch.equal(back.moments[l], two.moments[l]) for l in (1, 2))  # float64, bit-identical
    with pytest.raises(ForgottenStateError, match="sha256 differs"):
        load_state(path, "0" * 64)
    data = bytearray(path.read_bytes())
    data[-8:] = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"  # a NaN in the last entry
    path.write_bytes(bytes(data))
    with pytest.raises(ForgottenStateError, match="non-finite"):
        load_state(path)
    with pytest.raises(ForgottenStateError, match="missing"):
        load_state(tmp_path / "absent.safetensors")
    with pytest.raises(ForgottenStateError, match="layers"):
        two.check_compatible("m.{}.w", (1, 3))
    with pytest.raises(ForgottenStateError, match="not symmetric"):
        ForgottenState("m.{}.w", (1,), {1: torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64)}, 1).validate()


# ------------------------------------------------------------------------------------------------
# On a tiny model: EasyEdit's sequential calls
# ------------------------------------------------------------------------------------------------

REQUESTS_2 = [
    {"prompt": "the capital of italy is", "subject": "italy", "ground_truth": "rome"},
    {"prompt": "the capital of spain is", "subject": "spain", "ground_truth": "madrid"},
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _hp(tmp_path: Path, protection: Optional[float] = None, **overrides) -> ZeroUnlearnGDHyperParams:
    """Tiny GD hparams (``protection``: ``experimental.forgotten_protection_weight``); the tiny model's keys have
    ||k||^2 ~ 1e-3, so a protection weight of 1e4 lifts an earlier key's direction (eigenvalue lam ||k||^2) well
    above the null-space threshold."""
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"), alg_name="ZeroUnlearn-GD",
                               nullspace_threshold=1e-2, norm_weight=0.1, fluency_max_increase=None)
    if protection is not None:
        overrides.setdefault("experimental", {})["forgotten_protection_weight"] = protection
    config.update(overrides)
    return ZeroUnlearnGDHyperParams.from_dict(config)


def _layer_keys(model, tok, hp, requests):
    """The forget keys of ``requests`` at each edited layer of ``model`` (as the edit reads them)."""
    from zerounlearn_editor.engine.pipeline import run_layerwise_edit

    seen = {}

    def solver(problem):
        seen[problem.layer] = problem.K_f.clone()
        return problem.W

    run_layerwise_edit(copy.deepcopy(model), tok, requests, hp, solver, progress=False)
    return seen


def test_sequential_edits_protect_the_first_edits_keys(tok, tmp_path):
    plain, protected = _hp(tmp_path), _hp(tmp_path, protection=1e4)
    base = tiny_llama(tok)
    model_p = copy.deepcopy(base)
    model_p, _ = apply_zerounlearn_gd_to_model(model_p, tok, forget_requests(), protected, progress=False)
    state = model_state(model_p)
    assert state is not None and state.count == 3 and state.layers == (1, 2)
    model_u = copy.deepcopy(model_p)
    attach_state(model_u, None)
    keys = _layer_keys(model_p, tok, protected, forget_requests())  # round 1's keys on the round-1 model
    weights = {l: get_weight_matrix(get_module(model_p, protected.rewrite_module_tmp.format(l))).double().clone()
               for l in protected.layers}
    model_u, _ = apply_zerounlearn_gd_to_model(model_u, tok, REQUESTS_2, plain, progress=False)
    model_p, _ = apply_zerounlearn_gd_to_model(model_p, tok, REQUESTS_2, protected, progress=False)
    assert model_state(model_u) is None and model_state(model_p).count == 5
    for layer in protected.layers:
        name = protected.rewrite_module_tmp.format(layer)
        moved_u = ((get_weight_matrix(get_module(model_u, name)).double() - weights[layer]) @ keys[layer]).norm()
        moved_p = ((get_weight_matrix(get_module(model_p, name)).double() - weights[layer]) @ keys[layer]).norm()
        changed = (get_weight_matrix(get_module(model_p, name)).double() - weights[layer]).norm()
        assert changed > 1e-4 * weights[layer].norm()  # round 2 did edit
        assert moved_p < 0.2 * moved_u, (layer, float(moved_p), float(moved_u))


def test_first_protected_edit_is_bit_identical_to_the_paper_edit(tok, tmp_path):
    base = tiny_llama(tok)
    a, _ = apply_zerounlearn_gd_to_model(base, tok, forget_requests(), _hp(tmp_path), copy=True, progress=False)
    b, _ = apply_zerounlearn_gd_to_model(base, tok, forget_requests(), _hp(tmp_path, protection=1.0),
                                         copy=True, progress=False)
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), name
    assert model_state(base) is None and model_state(a) is None and model_state(b).count == 3  # copy=True: copies only


def test_failed_edit_leaves_the_state_and_restore_makes_it_stale(tok, tmp_path, caplog, monkeypatch):
    hp = _hp(tmp_path, protection=1e4)
    model = tiny_llama(tok)
    model, weights_copy = apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, progress=False,
                                                        return_orig_weights=True)
    state = model_state(model)
    edited = {n: p.detach().clone() for n, p in model.named_parameters()}
    calls = []
    real = method_module.solve_exact

    def second_layer_fails(*args, **kwargs):  # layer 1 is written back, layer 2's solve breaks: the edit is undone
        calls.append(1)
        D = real(*args, **kwargs)
        return D if len(calls) == 1 else D * float("nan")

    monkeypatch.setattr(method_module, "solve_exact", second_layer_fails)
    with pytest.raises(ValueError, match="non-finite"):
        apply_zerounlearn_gd_to_model(model, tok, REQUESTS_2, hp, progress=False)
    monkeypatch.undo()
    assert len(calls) == 2
    assert model_state(model) is state  # untouched by the failed edit
    assert all(torch.equal(p, edited[n]) for n, p in model.named_parameters())
    assert state.weights_digest == edited_weights_digest(model, hp.rewrite_module_tmp, hp.layers)
    # EasyEdit without sequential_edit restores the weights: the state no longer describes them and is dropped
    with torch.no_grad():
        for name, value in weights_copy.items():
            dict(model.named_parameters())[name].copy_(value)
    caplog.set_level(logging.INFO)
    model, _ = apply_zerounlearn_gd_to_model(model, tok, REQUESTS_2, hp, progress=False)
    assert "the last edit was undone" in caplog.text
    assert not [r for r in caplog.records if r.name.endswith("forgotten_state") and r.levelno >= logging.WARNING]
    assert model_state(model).count == 2
    fresh, _ = apply_zerounlearn_gd_to_model(tiny_llama(tok), tok, REQUESTS_2, hp, progress=False)
    for (name, p), (_, q) in zip(model.named_parameters(), fresh.named_parameters()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("value", [-1.0, -1, "one", True, None, [1.0], float("inf"), float("nan")])
def test_bad_protection_weight_is_refused(tmp_path, value):
    with pytest.raises(HParamsError, match=r"key 'experimental\.forgotten_protection_weight' must be a finite number "
                       r">= 0, got "):
        _hp(tmp_path, experimental={"forgotten_protection_weight": value})


def test_a_protection_weight_in_scientific_notation_is_a_number(tmp_path):
    """YAML 1.1 reads ``1e4`` as a string; under ``experimental:`` too it becomes a number, as at the top level."""
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"), alg_name="ZeroUnlearn-GD")
    path = tmp_path / "lifelong.yaml"
    path.write_text(yaml.safe_dump(config) + "experimental:\n  forgotten_protection_weight: 1e4\n", encoding="utf-8")
    assert yaml.safe_load(path.read_text())["experimental"]["forgotten_protection_weight"] == "1e4"
    assert ZeroUnlearnGDHyperParams.from_hparams(path).forgotten_protection == 1e4


def test_the_protection_weight_lives_under_experimental_and_is_off_by_default(tmp_path):
    """One accessor reads it; absent = 0 (the paper's edit, no tracking); an int is a float."""
    assert _hp(tmp_path).forgotten_protection == 0.0 and not _hp(tmp_path).tracks_forgotten()
    zero = _hp(tmp_path, protection=0)
    assert zero.forgotten_protection == 0.0 and not zero.tracks_forgotten()
    hp = _hp(tmp_path, protection=2)
    assert hp.forgotten_protection == 2.0 and isinstance(hp.forgotten_protection, float) and hp.tracks_forgotten()
    assert hp.replace(layers=[1]).forgotten_protection == 2.0  # travels with the mapping
    assert ZeroUnlearnHyperParams.from_dict(
        tiny_hparams_dict(tmp_path / "stats", tmp_path / "corpus.jsonl")).forgotten_protection == 0.0
    with pytest.raises(HParamsError, match=r"unknown key\(s\) \['forgotten_protection_weight'\] under 'experimental'"):
        ZeroUnlearnHyperParams.from_dict(tiny_hparams_dict(
            tmp_path / "stats", tmp_path / "corpus.jsonl", experimental={"forgotten_protection_weight": 1.0}))


def test_a_top_level_protection_weight_is_refused_naming_the_file_and_experimental(tmp_path):
    """A YAML of the key's top-level days fails before any model loads, saying to move it under experimental:."""
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"), alg_name="ZeroUnlearn-GD")
    path = tmp_path / "old-lifelong.yaml"
    path.write_text(yaml.safe_dump(dict(config, forgotten_protection_weight=1.0)), encoding="utf-8")
    with pytest.raises(HParamsError) as info:
        ZeroUnlearnGDHyperParams.from_hparams(path)
    message = str(info.value)
    assert message.startswith(f"{path}: 'forgotten_protection_weight' ") and "\n" not in message
    assert "move it under experimental:" in message
    with pytest.raises(HParamsError, match="move it under experimental:"):
        _hp(tmp_path).replace(forgotten_protection_weight=0.0)  # even at the old default


def test_weights_changed_behind_the_state_drop_it_with_a_warning(tok, tmp_path, caplog):
    hp = _hp(tmp_path, protection=1e4)
    model, _ = apply_zerounlearn_gd_to_model(tiny_llama(tok), tok, forget_requests(), hp, progress=False)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(1.01)
    model, _ = apply_zerounlearn_gd_to_model(model, tok, REQUESTS_2, hp, progress=False)
    assert "changed since the last edit" in caplog.text and model_state(model).count == 2


def _restore(model, weights_copy) -> None:
    with torch.no_grad():
        for name, value in weights_copy.items():
            dict(model.named_parameters())[name].copy_(value)


def test_undoing_the_last_edit_keeps_the_state_of_the_edits_still_in_the_weights(tok, tmp_path, caplog):
    """Edit A, edit B, restore B's weights, edit C: the state holds A and C (issue 46), as edits A then C do."""
    hp = _hp(tmp_path, protection=1e4)
    facts_b, facts_c = REQUESTS_2[:1], REQUESTS_2[1:]
    model = tiny_llama(tok)
    model, copy_a = apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, progress=False,
                                                  return_orig_weights=True)
    model, copy_b = apply_zerounlearn_gd_to_model(model, tok, facts_b, hp, progress=False, return_orig_weights=True)
    assert model_state(model).count == 4
    _restore(model, copy_b)
    caplog.set_level(logging.INFO)
    model, _ = apply_zerounlearn_gd_to_model(model, tok, facts_c, hp, progress=False)
    assert "the last 1 edit(s) were undone" in caplog.text and "keeps the 3 forgotten fact(s)" in caplog.text
    assert not [r for r in caplog.records if r.name.endswith("forgotten_state") and r.levelno >= logging.WARNING]
    state = model_state(model)
    reference = tiny_llama(tok)
    reference, _ = apply_zerounlearn_gd_to_model(reference, tok, forget_requests(), hp, progress=False)
    reference, _ = apply_zerounlearn_gd_to_model(reference, tok, facts_c, hp, progress=False)
    expected = model_state(reference)
    assert state.count == expected.count == 4
    for layer in hp.layers:
        scale = float(expected.moments[layer].abs().max())
        assert float((state.moments[layer] - expected.moments[layer]).abs().max()) <= 1e-9 * scale, layer
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-6), name  # C protected A's keys as in the A-then-C sequence


def test_undoing_every_edit_leaves_no_state(tok, tmp_path, caplog):
    hp = _hp(tmp_path, protection=1e4)
    model = tiny_llama(tok)
    model, copy_a = apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, progress=False,
                                                  return_orig_weights=True)
    model, copy_b = apply_zerounlearn_gd_to_model(model, tok, REQUESTS_2[:1], hp, progress=False,
                                                  return_orig_weights=True)
    _restore(model, copy_b)
    _restore(model, copy_a)
    caplog.set_level(logging.INFO)
    model, _ = apply_zerounlearn_gd_to_model(model, tok, REQUESTS_2[1:], hp, progress=False)
    assert "the last edit was undone" in caplog.text
    assert model_state(model).count == 1


def test_the_kept_keys_never_outgrow_the_moments():
    state = empty_state("m.{}", [0], {0: 4})
    g = torch.Generator().manual_seed(0)
    digests = []
    for step in range(4):  # 2 keys an edit, d_in = 4: only the last two edits can be taken out again
        K = torch.randn(4, 2, generator=g, dtype=F64)
        state = add_keys(state, {0: key_moment(K)}, 2, f"after{step}", f"before{step}", keys={0: K})
        digests.append(f"before{step}")
    assert [r.digest_before for r in state.history] == digests[2:]
    kept, undone = undo_to(state, "before2")
    assert undone == 2 and kept.count == 4 and kept.weights_digest == "before2"
    assert undo_to(state, "before1") == (None, -1)
