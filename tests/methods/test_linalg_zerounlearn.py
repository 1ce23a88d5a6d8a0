"""The maths of ZeroUnlearn's multiplicative update, on random problems (no model)."""
from __future__ import annotations

import pytest
import torch

from zerounlearn_editor.methods.zerounlearn.solve import (
    NonFiniteError,
    forget_projector,
    forget_value_basis,
    zerounlearn_multiplier,
    zerounlearn_normal_matrices,
)


def _problem(d_out=12, d_in=20, n=3, n0=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    K_f = torch.randn(d_in, n, generator=g, dtype=torch.float64)
    K_0 = torch.randn(d_in, n0, generator=g, dtype=torch.float64)
    C0 = K_0 @ K_0.t() / n0
    M_n = torch.randn(d_out, n, generator=g, dtype=torch.float64)
    return W, K_f, K_0, C0, M_n


def test_exact_projector_removes_forget_values():
    W, K_f, _, C0, M_n = _problem()
    D = zerounlearn_multiplier(W, K_f, M_n, C0, 1.0, 10.0, 1.0)
    W_new = D @ W
    M_f = W @ K_f
    residual = M_f.t() @ W_new @ K_f
    assert residual.abs().max() < 1e-9 * (M_f.norm() ** 2)


def test_unprojected_multiplier_satisfies_normal_equations_of_the_spec():
    """D0 (W (B + rI) W^T) = (A + rW) W^T with A, B exactly as written in the method."""
    W, K_f, _, C0, M_n = _problem()
    f, u, r = 2.0, 7.0, 0.5
    A = f * M_n @ K_f.t() + u * W @ C0
    B = f * K_f @ K_f.t() + u * C0
    lhs = W @ (B + r * torch.eye(W.shape[1], dtype=torch.float64)) @ W.t()
    rhs = (A + r * W) @ W.t()
    got_lhs, got_rhs = zerounlearn_normal_matrices(W, K_f, M_n, C0, f, u, r)
    torch.testing.assert_close(got_lhs, lhs, rtol=1e-10, atol=1e-8)
    torch.testing.assert_close(got_rhs, rhs, rtol=1e-10, atol=1e-8)
    # D = P D0 with D0 the solution of D0 lhs = rhs
    D = zerounlearn_multiplier(W, K_f, M_n, C0, f, u, r)
    D0 = torch.linalg.solve(lhs, rhs.t()).t()
    torch.testing.assert_close(D, forget_projector(W @ K_f) @ D0, rtol=1e-6, atol=1e-6 * D.abs().max().item())


def test_multiplier_minimises_the_weighted_objective():
    W, K_f, K_0, C0, M_n = _problem(n0=50)
    f, u, r = 1.0, 5.0, 1.0
    lhs, rhs = zerounlearn_normal_matrices(W, K_f, M_n, C0, f, u, r)
    D0 = torch.linalg.solve(lhs, rhs.t()).t()

    def objective(D):
        return (
            f * (D @ W @ K_f - M_n).pow(2).sum()
            + u * (D @ W @ K_0 - W @ K_0).pow(2).sum() / K_0.shape[1]
            + r * (D @ W - W).pow(2).sum()
        )

    best = objective(D0)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        assert objective(D0 + 1e-3 * torch.randn(D0.shape, generator=g, dtype=torch.float64)) > best


def test_utility_keys_move_little_with_large_utility_weight():
    W, K_f, K_0, C0, M_n = _problem(d_out=12, d_in=40, n=2, n0=400)
    W_small = zerounlearn_multiplier(W, K_f, M_n, C0, 1.0, 1.0, 1.0) @ W
    W_large = zerounlearn_multiplier(W, K_f, M_n, C0, 1.0, 1e4, 1.0) @ W
    def change(Wn):
        return ((Wn - W) @ K_0).norm() / (W @ K_0).norm()

    assert change(W_large) < change(W_small)
    # The projector alone removes the forget span; utility values change by about that much.
    V = forget_value_basis(W @ K_f)
    projected_share = (V.t() @ W @ K_0).norm() / (W @ K_0).norm()
    assert change(W_large) < projected_share * 1.5


def test_rank_deficient_forget_values_and_basis_is_orthonormal():
    W, K_f, _, C0, M_n = _problem(n=4)
    K_f[:, 3] = K_f[:, 0] * 2.0  # duplicated fact
    V = forget_value_basis(W @ K_f)
    assert V.shape[1] == 3
    torch.testing.assert_close(V.t() @ V, torch.eye(3, dtype=torch.float64), atol=1e-10, rtol=0)


def test_non_finite_inputs_raise():
    W, K_f, _, C0, M_n = _problem()
    bad = M_n.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="M_n"):
        zerounlearn_multiplier(W, K_f, bad, C0)
    with pytest.raises(ValueError, match="shape mismatch"):
        zerounlearn_multiplier(W, K_f[:-1], M_n, C0)


def test_float32_inputs_are_solved_in_float64():
    W, K_f, _, C0, M_n = _problem()
    D32 = zerounlearn_multiplier(W.float(), K_f.float(), M_n.float(), C0.float(), 1.0, 10.0, 1.0)
    assert D32.dtype == torch.float64
