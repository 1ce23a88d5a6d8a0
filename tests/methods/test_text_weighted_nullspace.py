"""ZeroUnlearn-GD's text-weighted null-space penalty (``nullspace_text_weight``; solve.py docstring).

The weighted objective ``a ||M_f^T X||^2 + b ||X - M_n||^2 + c sum_j (1 + w e_j / t) ||F_:,j||^2``, ``e_j`` the
eigenvalues of ``C0`` on the null directions ``U0``, ``t`` the threshold; its minimiser comes from either solver
given the basis ``U0 diag(1 + w e / t)^(-1/2)``.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from tiny_models import tiny_gd_target_hparams, tiny_hparams_dict
from zerounlearn_editor import ZeroUnlearnHyperParams
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import LayerProblem
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver
from zerounlearn_editor.methods.zerounlearn_gd.solve import (
    null_eigenpairs,
    nullspace_basis,
    solve_exact,
    solve_gd,
    symmetric_eigenpairs,
    text_weighted_basis,
)

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("single_torch_thread")


class Layer(NamedTuple):
    W: torch.Tensor      # [d_out, d_in]
    K_f: torch.Tensor    # [d_in, n]
    M_n: torch.Tensor    # [d_out, n]
    C0: torch.Tensor     # [d_in, d_in], eigenvalues spread over four decades
    threshold: float     # C0's median eigenvalue: about half the directions are "null", with e_j up to it


def make_layer(d_out: int, d_in: int, n: int, seed: int = 0) -> Layer:
    g = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(d_in, d_in, generator=g, dtype=F64))
    C0 = basis @ torch.diag(torch.logspace(-4, 0, d_in, dtype=F64)) @ basis.T
    W = torch.randn(d_out, d_in, generator=g, dtype=F64)
    return Layer(W, torch.randn(d_in, n, generator=g, dtype=F64), torch.randn(d_out, n, generator=g, dtype=F64),
                 C0, float(torch.linalg.eigvalsh(C0).median()))


def null_pairs(layer: Layer):
    return null_eigenpairs(*symmetric_eigenpairs(layer.C0), layer.threshold)


SHAPES = [pytest.param((6, 16, 3), id="n<r,dout<din"), pytest.param((20, 12, 30), id="n>r,dout>din")]
WEIGHTS = dict(a=1.0, b=100.0, c=30.0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("solver", [solve_exact, solve_gd])
@pytest.mark.parametrize("w", [1.0, 30.0, 1000.0])
def test_the_solve_is_stationary_for_the_text_weighted_objective(shape, solver, w):
    """``dJ/dF = 2 [Q F G + F diag(c (1 + w e / t)) - Z] = 0`` at ``F = D_m U0`` (``U0`` orthonormal)."""
    layer = make_layer(*shape)
    U0, e0 = null_pairs(layer)
    a, b, c = WEIGHTS.values()
    M_f = layer.W @ layer.K_f
    D_m = solver(layer.W, layer.K_f, M_f, layer.M_n, text_weighted_basis(U0, e0, w, layer.threshold), **WEIGHTS)
    F = D_m @ U0
    assert torch.allclose(F @ U0.T, D_m, atol=1e-10 * float(D_m.abs().max()))  # the update stays in the null space
    Kt = U0.T @ layer.K_f
    X = layer.W @ layer.K_f + F @ Kt
    grad = (a * M_f @ (M_f.T @ X) + b * (X - layer.M_n)) @ Kt.T + c * F * (1 + w * e0 / layer.threshold)
    Z = (b * layer.M_n - a * M_f @ (M_f.T @ (layer.W @ layer.K_f)) - b * layer.W @ layer.K_f) @ Kt.T
    assert float(grad.norm()) <= (1e-9 if solver is solve_exact else 1e-6) * float(Z.norm())
    # and it is not the paper's minimiser, whose gradient here is far from 0
    F0 = solve_exact(layer.W, layer.K_f, M_f, layer.M_n, U0, **WEIGHTS) @ U0
    X0 = layer.W @ layer.K_f + F0 @ Kt
    grad0 = (a * M_f @ (M_f.T @ X0) + b * (X0 - layer.M_n)) @ Kt.T + c * F0 * (1 + w * e0 / layer.threshold)
    assert float(grad0.norm()) > 1e-4 * float(Z.norm())


@pytest.mark.parametrize("shape", SHAPES)
def test_weight_zero_is_the_paper_solve_bit_for_bit(shape):
    layer = make_layer(*shape)
    U0, e0 = null_pairs(layer)
    args = (layer.W, layer.K_f, layer.W @ layer.K_f, layer.M_n)
    assert torch.equal(text_weighted_basis(U0, e0, 0.0, layer.threshold), U0)
    assert torch.equal(solve_exact(*args, text_weighted_basis(U0, e0, 0, layer.threshold), **WEIGHTS),
                       solve_exact(*args, U0, **WEIGHTS))
    assert torch.equal(U0, nullspace_basis(layer.C0, layer.threshold)[0])
    assert e0.shape == (U0.shape[1],) and bool((e0 < layer.threshold).all())
    assert torch.allclose(U0.T @ layer.C0 @ U0, torch.diag(e0), atol=1e-12)  # e0 are U0's eigenvalues


@pytest.mark.parametrize("shape", SHAPES)
def test_the_text_change_falls_as_the_weight_grows(shape):
    """``tr(D_m C0 D_m^T) = sum_j e_j ||F_:,j||^2`` falls strictly with ``w``, and the forget values move less
    (the trade: the null directions the text uses are dearer)."""
    layer = make_layer(*shape)
    U0, e0 = null_pairs(layer)
    M_f = layer.W @ layer.K_f
    text, reach = [], []
    for w in (0.0, 1.0, 10.0, 100.0, 1000.0):
        D_m = solve_exact(layer.W, layer.K_f, M_f, layer.M_n, text_weighted_basis(U0, e0, w, layer.threshold),
                          **WEIGHTS)
        F = D_m @ U0
        change = float(torch.trace(D_m @ layer.C0 @ D_m.T))
        assert change == pytest.approx(float((e0 * F.square().sum(0)).sum()), rel=1e-9)
        text.append(change)
        reach.append(float((M_f + D_m @ layer.K_f - layer.M_n).norm()))
    assert all(later < earlier for earlier, later in zip(text, text[1:])), text
    assert text[-1] < 0.5 * text[0]
    assert all(later >= earlier for earlier, later in zip(reach, reach[1:])), reach


def test_bad_inputs_are_refused_naming_what():
    layer = make_layer(6, 16, 3)
    U0, e0 = null_pairs(layer)
    with pytest.raises(ValueError, match="nullspace text weight must be finite and >= 0"):
        text_weighted_basis(U0, e0, -1.0, layer.threshold)
    with pytest.raises(ValueError, match="nullspace text weight must be finite"):
        text_weighted_basis(U0, e0, float("nan"), layer.threshold)
    with pytest.raises(ValueError, match="needs a threshold > 0"):
        text_weighted_basis(U0, e0, 10.0, 0.0)
    # r: C0's eigenvalues below its median, where the last one's side of the threshold is in the LAPACK's last bit
    with pytest.raises(ValueError, match=f"null_evals must be a 1-D tensor of U0's r={U0.shape[1]} "):
        text_weighted_basis(U0, e0[:-1], 10.0, layer.threshold)
    with pytest.raises(ValueError, match="null_evals contains NaN"):
        text_weighted_basis(U0, torch.full_like(e0, float("inf")), 10.0, layer.threshold)


@pytest.mark.parametrize("value", [-1.0, "ten", True, float("inf"), [1.0]])
def test_the_key_is_checked_when_the_yaml_is_read(tmp_path, value):
    with pytest.raises(HParamsError, match=r"'nullspace_text_weight' must be a finite number"):
        tiny_gd_target_hparams(tmp_path, nullspace_text_weight=value)
    with pytest.raises(HParamsError, match=r"relative to 'nullspace_threshold', which must then be > 0, got 0"):
        tiny_gd_target_hparams(tmp_path, nullspace_threshold=0.0, nullspace_text_weight=1.0)
    tiny_gd_target_hparams(tmp_path, nullspace_threshold=0.0, nullspace_text_weight=0)
    assert tiny_gd_target_hparams(tmp_path).nullspace_text_weight is None  # the default: the paper
    tiny_gd_target_hparams(tmp_path, nullspace_threshold=0.0, nullspace_text_weight=None)
    with pytest.raises(HParamsError, match=r"unknown key\(s\) \['nullspace_text_weight'\] for ZeroUnlearnHyperParams"):
        ZeroUnlearnHyperParams.from_dict(tiny_hparams_dict(tmp_path / "stats", tmp_path / "c.jsonl",
                                                           nullspace_text_weight=1.0))


@pytest.mark.parametrize("cached", [False, True])
def test_the_edit_without_the_key_is_the_paper_solve_and_with_it_the_weighted_one(tmp_path: Path, cached,
                                                                                  monkeypatch):
    """The layer solve of the method: no key (or 0) gives today's bits; ``w`` gives the weighted basis's solve, for
    ``solver: exact`` and (to its tolerance) ``solver: gd``; with the eigendecomposition cache (``cached``: one that
    stores this small ``C0``) the eigenvalues the weight reads come back from the stored entry."""
    from zerounlearn_editor.engine.stats import eigen_cache as cache_module
    from zerounlearn_editor.methods.zerounlearn_gd import method as gd_method

    if cached:  # the package caches only d_in >= 256: a cache that stores this 24-dim C0 too
        monkeypatch.setattr(gd_method, "eigen_cache_of", lambda stats_dir: cache_module.EigenCache(
            Path(stats_dir) / cache_module.EIGH_FOLDER, min_dim=1))
    layer = make_layer(12, 24, 5)
    problem = LayerProblem(layer=1, W=layer.W, K_f=layer.K_f, M_n=layer.M_n, C0=layer.C0)
    U0, e0 = null_pairs(layer)

    def hparams(**changes):
        hp = tiny_gd_target_hparams(tmp_path, nullspace_threshold=layer.threshold, orthogonality_weight=1.0,
                                    target_weight=100.0, norm_weight=30.0, **changes)
        if cached:
            Path(hp.stats_dir).mkdir(parents=True, exist_ok=True)
        return hp

    paper = layer.W + solve_exact(layer.W, layer.K_f, problem.M_f, layer.M_n, U0, **WEIGHTS)
    assert torch.equal(zerounlearn_gd_solver(hparams())(problem), paper)
    assert torch.equal(zerounlearn_gd_solver(hparams(nullspace_text_weight=0))(problem), paper)
    weighted = zerounlearn_gd_solver(hparams(nullspace_text_weight=50.0))(problem)
    want = layer.W + solve_exact(layer.W, layer.K_f, problem.M_f, layer.M_n,
                                 text_weighted_basis(U0, e0, 50.0, layer.threshold), **WEIGHTS)
    assert torch.equal(weighted, want)
    assert not torch.allclose(weighted, paper, atol=1e-6)
    gd = zerounlearn_gd_solver(hparams(solver="gd", nullspace_text_weight=50.0))(problem)
    assert torch.allclose(gd, want, atol=1e-8 * float((want - layer.W).abs().max()))
    if cached:  # every solve after the first read the eigenpairs from the one stored entry
        assert len(list((Path(hparams().stats_dir) / cache_module.EIGH_FOLDER).glob("eigh_*.npz"))) == 1
        assert torch.equal(zerounlearn_gd_solver(hparams(nullspace_text_weight=50.0))(problem), want)
