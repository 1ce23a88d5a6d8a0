"""ZeroUnlearn-GD's text weight chosen per layer from the forget keys (``nullspace_text_weight: {key_reach:
A}``; ``solve.key_reach`` / ``solve.relative_text_weight``, notebook 2026-11-30-gemma-textweight-rule.md).

``A(w) = (b / c) sum_j s_j / (1 + w x_j) / n`` with ``s_j = ||u_j^T K_f||^2`` and ``x_j = e_j / t``; the rule takes
the ``w`` with ``A(w) = A`` (0 where ``A(0) <= A``). For one fact and ``a = 0`` the weighted solve writes exactly
``A(w) / (1 + A(w))`` of the asked value change.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from tiny_models import tiny_gd_target_hparams
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import LayerProblem
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver
from zerounlearn_editor.methods.zerounlearn_gd.solve import (
    key_reach,
    null_eigenpairs,
    relative_text_weight,
    solve_exact,
    symmetric_eigenpairs,
    text_weighted_basis,
)

F64 = torch.float64
KEY = "nullspace_text_weight"

pytestmark = pytest.mark.usefixtures("single_torch_thread")


class Layer(NamedTuple):
    W: torch.Tensor      # [d_out, d_in]
    K_f: torch.Tensor    # [d_in, n]
    M_n: torch.Tensor    # [d_out, n]
    C0: torch.Tensor     # [d_in, d_in], eigenvalues over four decades
    threshold: float     # C0's median eigenvalue


def make_layer(d_out: int, d_in: int, n: int, seed: int = 0) -> Layer:
    g = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(d_in, d_in, generator=g, dtype=F64))
    C0 = basis @ torch.diag(torch.logspace(-4, 0, d_in, dtype=F64)) @ basis.T
    return Layer(torch.randn(d_out, d_in, generator=g, dtype=F64), torch.randn(d_in, n, generator=g, dtype=F64),
                 torch.randn(d_out, n, generator=g, dtype=F64), C0, float(torch.linalg.eigvalsh(C0).median()))


def keys_on_null(layer: Layer):
    """``(U0, e0, Kt [r, n], x [r])`` of the layer."""
    U0, e0 = null_eigenpairs(*symmetric_eigenpairs(layer.C0), layer.threshold)
    return U0, e0, U0.T @ layer.K_f, (e0 / layer.threshold).clamp_min(0.0)


def test_key_reach_is_the_paper_ratio_at_zero_and_falls_with_the_weight():
    layer = make_layer(6, 16, 3)
    _, _, Kt, x = keys_on_null(layer)
    assert key_reach(Kt, x, 0.0, 100.0, 30.0) == pytest.approx(100.0 / 30.0 * float(Kt.square().sum()) / 3, rel=1e-12)
    values = [key_reach(Kt, x, w, 100.0, 30.0) for w in (0.0, 0.1, 1.0, 10.0, 100.0)]
    assert all(later < earlier for earlier, later in zip(values, values[1:])), values


@pytest.mark.parametrize("share", [0.9, 0.5, 0.1])
def test_the_weight_gives_the_asked_reach(share):
    layer = make_layer(6, 16, 3)
    _, _, Kt, x = keys_on_null(layer)
    reach = share * key_reach(Kt, x, 0.0, 100.0, 30.0)
    w = relative_text_weight(Kt, x, reach, 100.0, 30.0)
    assert w > 0
    assert key_reach(Kt, x, w, 100.0, 30.0) == pytest.approx(reach, rel=1e-9)


def test_no_weight_where_the_paper_reach_is_already_low_and_the_cap_where_no_weight_reaches_it():
    layer = make_layer(6, 16, 3)
    _, _, Kt, x = keys_on_null(layer)
    a0 = key_reach(Kt, x, 0.0, 100.0, 30.0)
    assert relative_text_weight(Kt, x, a0, 100.0, 30.0) == 0.0
    assert relative_text_weight(Kt, x, 2 * a0, 100.0, 30.0) == 0.0
    # keys only on directions without text variance: no weight lowers the reach
    assert relative_text_weight(Kt, torch.zeros_like(x), 0.5 * a0, 100.0, 30.0) == 1e6


@pytest.mark.parametrize("w", [0.0, 3.0, 300.0])
def test_one_fact_without_the_orthogonality_term_writes_reach_over_one_plus_reach(w):
    """The derivation: ``a = 0``, ``n = 1``: ``D_m k = A(w) / (1 + A(w)) (M_n - W k)`` exactly."""
    layer = make_layer(8, 20, 1, seed=3)
    U0, e0, Kt, x = keys_on_null(layer)
    b, c = 100.0, 30.0
    D_m = solve_exact(layer.W, layer.K_f, layer.W @ layer.K_f, layer.M_n,
                      text_weighted_basis(U0, e0, w, layer.threshold), a=0.0, b=b, c=c)
    A = key_reach(Kt, x, w, b, c)
    want = A / (1 + A) * (layer.M_n - layer.W @ layer.K_f)
    assert torch.allclose(D_m @ layer.K_f, want, atol=1e-10 * float(want.abs().max()))


def test_bad_inputs_are_refused_naming_what():
    layer = make_layer(6, 16, 3)
    _, _, Kt, x = keys_on_null(layer)
    # r: C0's eigenvalues below its median, where the last one's side of the threshold is in the LAPACK's last bit
    with pytest.raises(ValueError, match=f"x must be a 1-D tensor of Kt's r={Kt.shape[0]} "):
        relative_text_weight(Kt, x[:-1], 1.0, 100.0, 30.0)
    with pytest.raises(ValueError, match="x must be finite and >= 0"):
        relative_text_weight(Kt, -x, 1.0, 100.0, 30.0)
    with pytest.raises(ValueError, match="needs reach > 0 and c > 0"):
        relative_text_weight(Kt, x, 0.0, 100.0, 30.0)
    with pytest.raises(ValueError, match="needs reach > 0 and c > 0"):
        relative_text_weight(Kt, x, 1.0, 100.0, 0.0)
    with pytest.raises(ValueError, match="reach must be finite"):
        relative_text_weight(Kt, x, float("inf"), 100.0, 30.0)
    with pytest.raises(ValueError, match="Kt contains NaN"):
        relative_text_weight(torch.full_like(Kt, float("nan")), x, 1.0, 100.0, 30.0)


@pytest.mark.parametrize("value, message", [
    ({"key_reach": 0}, r"'nullspace_text_weight\.key_reach' must be a finite number > 0, got 0"),
    ({"key_reach": -1.0}, r"'nullspace_text_weight\.key_reach' must be a finite number > 0"),
    ({"key_reach": True}, r"'nullspace_text_weight\.key_reach' must be a finite number > 0"),
    ({"key_reach": "0.6"}, r"'nullspace_text_weight\.key_reach' must be a finite number > 0"),
    ({"key_reach": float("inf")}, r"'nullspace_text_weight\.key_reach' must be a finite number > 0"),
    ({}, r"as a mapping takes exactly one key 'key_reach', got \[\]"),
    ({"relative": 0.6}, r"as a mapping takes exactly one key 'key_reach', got \['relative'\]"),
    ({"key_reach": 0.6, "w": 1}, r"exactly one key 'key_reach', got \['key_reach', 'w'\]"),
    ("ten", r"must be a finite number >= 0 \(0: the paper\) or \{key_reach: A\} with A > 0, got 'ten'"),
])
def test_the_mapping_form_is_checked_when_the_yaml_is_read(tmp_path, value, message):
    with pytest.raises(HParamsError, match=message):
        tiny_gd_target_hparams(tmp_path, **{KEY: value})


def test_the_mapping_form_needs_a_threshold_and_a_norm_weight(tmp_path):
    tiny_gd_target_hparams(tmp_path, **{KEY: {"key_reach": 0.6}})
    with pytest.raises(HParamsError, match=r"key_reach' needs 'nullspace_threshold' > 0, got 0"):
        tiny_gd_target_hparams(tmp_path, nullspace_threshold=0.0, **{KEY: {"key_reach": 0.6}})
    with pytest.raises(HParamsError, match=r"key_reach' needs 'norm_weight' > 0, got 0"):
        tiny_gd_target_hparams(tmp_path, norm_weight=0.0, **{KEY: {"key_reach": 0.6}})


def test_the_edit_sets_the_weight_at_its_first_layer_keeps_it_and_logs_it(tmp_path: Path, caplog):
    """The method's solve with ``{key_reach: A}``: at the first edited layer (``layers[0] = 1``) the weighted solve at
    ``relative_text_weight``'s ``w`` of that layer's keys; at the next layer the same ``w`` (not its own); a new edit
    (the first layer again) sets it anew. The plain number keeps its meaning (the other file pins it bit for bit)."""
    first, second = make_layer(12, 24, 5, seed=0), make_layer(12, 24, 5, seed=1)
    weights = dict(a=1.0, b=100.0, c=30.0)
    hp = tiny_gd_target_hparams(tmp_path, nullspace_threshold=first.threshold, orthogonality_weight=1.0,
                                target_weight=100.0, norm_weight=30.0)
    assert hp.layers[:2] == [1, 2]

    def solver(value):
        return zerounlearn_gd_solver(hp.replace(**{KEY: value}))

    def want(layer: Layer, w: float):
        U0, e0, _, _ = keys_on_null(layer._replace(threshold=first.threshold))
        return layer.W + solve_exact(layer.W, layer.K_f, layer.W @ layer.K_f, layer.M_n,
                                     text_weighted_basis(U0, e0, w, first.threshold), **weights)

    def problem(layer: Layer, index: int):
        return LayerProblem(layer=index, W=layer.W, K_f=layer.K_f, M_n=layer.M_n, C0=layer.C0)

    _, _, Kt, x = keys_on_null(first)
    reach = 0.3 * key_reach(Kt, x, 0.0, 100.0, 30.0)
    w = relative_text_weight(Kt, x, reach, 100.0, 30.0)
    _, _, Kt2, x2 = keys_on_null(second._replace(threshold=first.threshold))
    assert abs(relative_text_weight(Kt2, x2, reach, 100.0, 30.0) - w) > 1e-3 * w  # the second layer's own differs
    solve = solver({"key_reach": reach})
    with caplog.at_level(logging.INFO, logger="zerounlearn_editor.methods.zerounlearn_gd.method"):
        assert torch.equal(solve(problem(first, 1)), want(first, w))
        assert torch.equal(solve(problem(second, 2)), want(second, w))
    assert f"layer 1: text weight {w:.4g} (set here" in caplog.text
    assert f"layer 2: text weight {w:.4g} (kept" in caplog.text
    # the next edit starts at the first layer again: its keys set the weight
    w2 = relative_text_weight(Kt2, x2, reach, 100.0, 30.0)
    assert torch.equal(solve(problem(second, 1)), want(second, w2))
    # the number form with the same w: the same bits
    assert torch.equal(solver(w)(problem(first, 1)), want(first, w))
    # a reach above the paper's: no weight, the paper's solve
    assert torch.equal(solver({"key_reach": 2 * key_reach(Kt, x, 0.0, 100.0, 30.0)})(problem(first, 1)),
                       want(first, 0.0))


def test_a_fact_with_twin_columns_counts_once_in_the_reach():
    """With ``quantized_forget_keys`` each fact brings two columns (its key and its twin's); the reach is
    per fact. A twin equal to the key, asking the same change: for one fact and ``a = 0`` the solve writes exactly
    ``A / (1 + A)`` of the asked change with ``A = key_reach(..., facts=1)`` over both columns (twice the
    column-mean reach the default ``facts`` gives)."""
    layer = make_layer(8, 20, 1, seed=3)
    K, M_n = layer.K_f.repeat(1, 2), layer.M_n.repeat(1, 2)                  # [d_in, 2], [d_out, 2]
    U0, e0, _, x = keys_on_null(layer)
    b, c, w = 100.0, 30.0, 3.0
    D_m = solve_exact(layer.W, K, layer.W @ K, M_n, text_weighted_basis(U0, e0, w, layer.threshold), a=0.0, b=b, c=c)
    Kt = U0.T @ K
    A = key_reach(Kt, x, w, b, c, facts=1)
    assert A == pytest.approx(2 * key_reach(Kt, x, w, b, c), rel=1e-12)
    want = A / (1 + A) * (layer.M_n - layer.W @ layer.K_f)
    assert torch.allclose(D_m @ layer.K_f, want, atol=1e-10 * float(want.abs().max()))
    w_fact = relative_text_weight(Kt, x, 0.5 * A, b, c, facts=1)
    assert w_fact > relative_text_weight(Kt, x, 0.5 * A, b, c)  # two columns counted as two facts: a smaller weight
    assert key_reach(Kt, x, w_fact, b, c, facts=1) == pytest.approx(0.5 * A, rel=1e-9)


def test_the_reach_may_be_written_in_scientific_notation(tmp_path):
    """YAML 1.1 reads ``6e-1`` as a string; the mapping's field is converted like the plain number."""
    hp = tiny_gd_target_hparams(tmp_path, **{KEY: {"key_reach": "6e-1"}})
    assert getattr(hp, KEY) == {"key_reach": 0.6}


def test_a_reach_no_weight_can_reach_is_a_warning(tmp_path: Path, caplog):
    """Keys whose null-space energy lies on directions without text variance: the cap, and a warning naming it."""
    layer = make_layer(12, 24, 5, seed=0)
    C0 = layer.C0.clone()
    U0, _, _, _ = keys_on_null(layer)
    keys = U0 @ (U0.T @ layer.K_f)                       # keys inside the null space
    hp = tiny_gd_target_hparams(tmp_path, nullspace_threshold=layer.threshold, target_weight=100.0, norm_weight=30.0)
    evals, evecs = symmetric_eigenpairs(C0)
    flat = evecs @ torch.diag(torch.where(evals < layer.threshold, torch.zeros_like(evals), evals)) @ evecs.T
    problem = LayerProblem(layer=1, W=layer.W, K_f=keys, M_n=layer.M_n, C0=flat)  # null directions: e_j = 0
    solve = zerounlearn_gd_solver(hp.replace(**{KEY: {"key_reach": 1e-3}}))
    with caplog.at_level(logging.INFO, logger="zerounlearn_editor.methods.zerounlearn_gd.method"):
        solve(problem)
    assert "no text weight up to 1e+06 brings the key reach down to 0.001" in caplog.text
