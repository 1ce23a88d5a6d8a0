"""Tests of the ZeroUnlearn-GD per-layer mathematics (zerounlearn_editor.methods.zerounlearn_gd.solve)."""
from __future__ import annotations

from typing import NamedTuple, Tuple

import pytest
import torch

from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis, solve_exact, solve_gd

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("single_torch_thread")


class Problem(NamedTuple):
    W: torch.Tensor      # [d_out, d_in]
    K_f: torch.Tensor    # [d_in, n]
    M_f: torch.Tensor    # [d_out, n]
    M_n: torch.Tensor    # [d_out, n]
    A: torch.Tensor      # [d_in, rank]; C0 = A A^T / rank
    P_m: torch.Tensor    # [d_in, d_in]
    U0: torch.Tensor     # [d_in, r]


def make_problem(d_out: int, d_in: int, n: int, rank: int, seed: int = 0, zero_rows: int = 2) -> Problem:
    """Random layer with a utility second moment ``C0 = A A^T / rank`` of rank ``rank``.

    ``A`` is Gaussian with ``zero_rows`` exactly-zero rows, so ``C0`` has exact zero rows and
    columns on top of its low rank; the null space has dimension ``r = d_in - rank``.
    """
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(d_in, rank, generator=g, dtype=F64)
    A[:zero_rows] = 0.0
    C0 = A @ A.T / rank
    W = torch.randn(d_out, d_in, generator=g, dtype=F64) / d_in ** 0.5
    K_f = torch.randn(d_in, n, generator=g, dtype=F64)
    M_f = W @ K_f
    M_n = torch.randn(d_out, n, generator=g, dtype=F64)
    U0, _ = nullspace_basis(C0, 1e-8)
    P_m = U0 @ U0.T
    assert U0.shape == (d_in, d_in - rank)
    return Problem(W, K_f, M_f, M_n, A, P_m, U0)


# (d_out, d_in, n, rank): r = d_in - rank.
SHAPES = [
    pytest.param((6, 10, 3, 4), id="n<r,dout<din"),
    pytest.param((20, 12, 5, 2), id="n<r,dout>din"),
    pytest.param((10, 8, 12, 3), id="n>r,dout>din"),
    pytest.param((8, 30, 40, 10), id="n>r,dout<din"),
    pytest.param((30, 16, 100, 5), id="n>dout,n>r"),
]
WEIGHTS = [
    pytest.param((1.0, 100.0, 0.1), id="default-weights"),
    pytest.param((0.5, 3.0, 1e-3), id="small-c"),
    pytest.param((0.0, 1.0, 1.0), id="a=0"),
]


def objective(W, K_f, M_f, M_n, D, a=1.0, b=100.0, c=0.1) -> float:
    """``J = a ||M_f^T (W + D) K_f||^2 + b ||(W + D) K_f - M_n||^2 + c ||D||^2``, as the paper writes it."""
    X = (W + D) @ K_f
    return float(a * (M_f.T @ X).square().sum() + b * (X - M_n).square().sum() + c * D.square().sum())


def rel_grad_at(p: Problem, D: torch.Tensor, a: float, b: float, c: float) -> float:
    """``||dJ/dF(D)|| / ||dJ/dF(0)||`` with ``F = D U0`` (``D = F U0^T``), gradients by autograd."""

    def grad(F: torch.Tensor) -> torch.Tensor:
        F = F.clone().requires_grad_(True)
        X = (p.W + F @ p.U0.T) @ p.K_f
        J = a * (p.M_f.T @ X).square().sum() + b * (X - p.M_n).square().sum() + c * F.square().sum()
        return torch.autograd.grad(J, F)[0]

    F = D @ p.U0
    return float(grad(F).norm() / grad(torch.zeros_like(F)).norm())


# ---------------------------------------------------------------------------------------------
# Projector
# ---------------------------------------------------------------------------------------------


def test_projector_is_orthogonal_projector_onto_null_space() -> None:
    p = make_problem(5, 12, 4, 5)
    assert p.P_m.dtype == F64 and p.U0.dtype == F64
    torch.testing.assert_close(p.P_m @ p.P_m, p.P_m, rtol=0, atol=1e-12)
    torch.testing.assert_close(p.P_m, p.P_m.T, rtol=0, atol=0)
    torch.testing.assert_close(p.U0.T @ p.U0, torch.eye(p.U0.shape[1], dtype=F64), rtol=0, atol=1e-12)
    assert float((p.P_m @ p.A).abs().max()) < 1e-12
    # The exact-zero rows of A are null directions of C0: P_m keeps them.
    e0 = torch.zeros(12, dtype=F64)
    e0[0] = 1.0
    torch.testing.assert_close(p.P_m @ e0, e0, rtol=0, atol=1e-12)


def test_basis_and_complement_split_the_space() -> None:
    """``U0 U0^T + U1 U1^T = I``: the complement basis spans what the null space leaves."""
    p = make_problem(4, 20, 3, 3)      # r = 17
    C0 = p.A @ p.A.T / 3
    U0, U1 = nullspace_basis(C0, 1e-8)
    assert U1.shape == (20, 3)
    torch.testing.assert_close(U0 @ U0.T + U1 @ U1.T, torch.eye(20, dtype=F64), rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Exact solver
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weights", WEIGHTS)
def test_exact_solution_is_stationary(shape: Tuple[int, int, int, int], weights: Tuple[float, float, float]) -> None:
    p = make_problem(*shape)
    D = solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0, *weights)
    assert D.shape == p.W.shape and D.dtype == F64
    assert rel_grad_at(p, D, *weights) < 1e-9


@pytest.mark.parametrize("shape", SHAPES)
def test_exact_solution_beats_perturbations(shape: Tuple[int, int, int, int]) -> None:
    p = make_problem(*shape, seed=1)
    D = solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0)
    J_star = objective(p.W, p.K_f, p.M_f, p.M_n, D)
    g = torch.Generator().manual_seed(7)
    for scale in (1e-4, 1e-2, 1.0):
        for _ in range(5):
            E = scale * torch.randn(p.W.shape, generator=g, dtype=F64)
            J = objective(p.W, p.K_f, p.M_f, p.M_n, D + E @ p.P_m)
            assert J >= J_star * (1 - 1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_update_vanishes_on_utility_keys(shape: Tuple[int, int, int, int]) -> None:
    p = make_problem(*shape, seed=2)
    D = solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0)
    assert float((D @ p.A).norm()) <= 1e-10 * float(D.norm() * p.A.norm())
    # ... and D_m = D_m P_m: the update lives on the null space only.
    torch.testing.assert_close(D @ p.P_m, D, rtol=0, atol=1e-10 * float(D.abs().max()))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("c", [0.1, 0.0])
def test_routes_agree(shape: Tuple[int, int, int, int], c: float) -> None:
    p = make_problem(*shape, seed=3)
    sols = {
        route: solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0, 1.0, 100.0, c, route=route)
        for route in ("auto", "dense", "lowrank")
    }
    ref = sols["dense"]
    for route in ("auto", "lowrank"):
        assert float((sols[route] - ref).norm()) <= 1e-9 * float(ref.norm()), route


def test_dense_route_ignores_rounding_noise_in_null_space_of_G() -> None:
    """n << r with large keys and small c: G's zero eigenvalues come out as rounding noise.

    Dividing the matching (noise) components of Z by c alone would put errors of order 1e-4
    into the dense route's answer; they must be dropped instead.
    """
    p = make_problem(40, 400, 20, 50, seed=3)     # r = 350, n = 20
    K_f = 10.0 * p.K_f
    M_f = p.W @ K_f
    D_thin = solve_exact(p.W, K_f, M_f, p.M_n, p.U0, 1.0, 100.0, 1e-3, route="lowrank")
    D_dense = solve_exact(p.W, K_f, M_f, p.M_n, p.U0, 1.0, 100.0, 1e-3, route="dense")
    assert float((D_dense - D_thin).norm()) <= 1e-9 * float(D_thin.norm())


def _autograd_minimiser(p: Problem, a: float, b: float, c: float) -> torch.Tensor:
    """Minimum-norm minimiser over all of ``E`` ``[d_out, d_in]`` from the autograd Hessian; returns ``E P_m``.

    Independent of the derivation: the objective is written directly in ``E`` and its
    Hessian and gradient come from autograd; the quadratic's normal equations
    ``H vec(E) = -grad(0)`` are solved with a pseudo-inverse.
    """
    d_out, d_in = p.W.shape

    def J(e: torch.Tensor) -> torch.Tensor:
        X = (p.W + e.reshape(d_out, d_in) @ p.P_m) @ p.K_f
        return (
            a * (p.M_f.T @ X).square().sum()
            + b * (X - p.M_n).square().sum()
            + c * (e.reshape(d_out, d_in) @ p.P_m).square().sum()
        )

    e0 = torch.zeros(d_out * d_in, dtype=F64)
    H = torch.autograd.functional.hessian(J, e0)
    g0 = torch.autograd.functional.jacobian(J, e0)
    e = -torch.linalg.pinv(H, hermitian=True, rtol=1e-10) @ g0
    return e.reshape(d_out, d_in) @ p.P_m


@pytest.mark.parametrize("n", [2, 5], ids=["n<r", "n>r"])
@pytest.mark.parametrize("weights", [(1.0, 100.0, 0.1), (2.0, 0.5, 0.0)], ids=["c>0", "c=0"])
def test_matches_brute_force_normal_equations(n: int, weights: Tuple[float, float, float]) -> None:
    """Tiny problem (d_out=3, d_in=4, r=3): closed form vs autograd Hessian and vs Kronecker system."""
    p = make_problem(3, 4, n, 1, seed=4, zero_rows=0)
    a, b, c = weights
    D_brute = _autograd_minimiser(p, a, b, c)
    for route in ("dense", "lowrank"):
        D = solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0, a, b, c, route=route)
        torch.testing.assert_close(D, D_brute, rtol=1e-7, atol=1e-9)

    # Kronecker form of Q F G + c F = Z with column-major vec: (G^T kron Q + c I) vec(F) = vec(Z).
    Kt = p.U0.T @ p.K_f
    Q = a * p.M_f @ p.M_f.T + b * torch.eye(3, dtype=F64)
    G = Kt @ Kt.T
    Z = (b * p.M_n @ p.K_f.T - Q @ p.W @ p.K_f @ p.K_f.T) @ p.U0
    r = p.U0.shape[1]
    L = torch.kron(G.T.contiguous(), Q) + c * torch.eye(3 * r, dtype=F64)
    vecF = torch.linalg.pinv(L, hermitian=True, rtol=1e-10) @ Z.T.reshape(-1)
    F = vecF.reshape(r, 3).T
    torch.testing.assert_close(F @ p.U0.T, D_brute, rtol=1e-7, atol=1e-9)


def test_c_zero_singular_system_gives_minimum_norm_minimiser() -> None:
    """c = 0 with n < r: the system is singular; the result is stationary and has no free component."""
    p = make_problem(6, 10, 3, 4, seed=5)
    D = solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0, 1.0, 100.0, 0.0)
    assert rel_grad_at(p, D, 1.0, 100.0, 0.0) < 1e-9
    # Minimum norm: rows of F lie in the span of Kt's columns (no component G cannot see).
    Kt = p.U0.T @ p.K_f
    F = D @ p.U0
    proj = Kt @ torch.linalg.pinv(Kt)
    torch.testing.assert_close(F @ proj, F, rtol=0, atol=1e-9 * float(F.abs().max()))


def test_empty_null_space_gives_zero_update() -> None:
    p = make_problem(5, 8, 4, 3)
    C0_full = torch.eye(8, dtype=F64) + p.A @ p.A.T
    U0, U1 = nullspace_basis(C0_full, 1e-3)
    assert U0.shape == (8, 0) and U1.shape == (8, 8)
    for solver in (solve_exact, solve_gd):
        D = solver(p.W, p.K_f, p.M_f, p.M_n, U0)
        assert D.shape == (5, 8) and D.dtype == F64
        assert float(D.abs().max()) == 0.0


# ---------------------------------------------------------------------------------------------
# Iterative solver
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weights", WEIGHTS[:2])
def test_gd_reaches_exact_optimum(shape: Tuple[int, int, int, int], weights: Tuple[float, float, float]) -> None:
    p = make_problem(*shape, seed=8)
    D_exact = solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0, *weights)
    D_gd = solve_gd(p.W, p.K_f, p.M_f, p.M_n, p.U0, *weights)
    J_exact = objective(p.W, p.K_f, p.M_f, p.M_n, D_exact, *weights)
    J_gd = objective(p.W, p.K_f, p.M_f, p.M_n, D_gd, *weights)
    assert abs(J_gd - J_exact) <= 1e-6 * J_exact
    # The iterate is built as F U0^T, so it never touches utility keys either.
    assert float((D_gd @ p.A).norm()) <= 1e-10 * float(D_gd.norm() * p.A.norm())


def test_gd_adam_phase_alone_decreases_objective() -> None:
    p = make_problem(8, 30, 40, 10, seed=9)
    J0 = objective(p.W, p.K_f, p.M_f, p.M_n, torch.zeros_like(p.W))
    D_exact = solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0)
    J_exact = objective(p.W, p.K_f, p.M_f, p.M_n, D_exact)
    D_adam = solve_gd(p.W, p.K_f, p.M_f, p.M_n, p.U0, steps=1000, cg_steps=0)
    J_adam = objective(p.W, p.K_f, p.M_f, p.M_n, D_adam)
    assert J_adam - J_exact < 1e-3 * (J0 - J_exact)


def test_gd_is_deterministic() -> None:
    p = make_problem(6, 10, 3, 4, seed=11)
    args = (p.W, p.K_f, p.M_f, p.M_n, p.U0)
    assert torch.equal(solve_gd(*args, steps=300), solve_gd(*args, steps=300))


# ---------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------


def test_projector_rejects_bad_C0() -> None:
    C0 = torch.eye(4, dtype=F64)
    nonsym = C0.clone()
    nonsym[0, 1] = 0.5
    with pytest.raises(ValueError, match="C0.*symmetric"):
        nullspace_basis(nonsym, 1e-3)
    with pytest.raises(ValueError, match="C0.*square"):
        nullspace_basis(torch.zeros(3, 4, dtype=F64), 1e-3)
    nan = C0.clone()
    nan[1, 1] = float("nan")
    with pytest.raises(ValueError, match="C0.*NaN"):
        nullspace_basis(nan, 1e-3)
    with pytest.raises(ValueError, match="C0"):
        nullspace_basis(torch.zeros(4, dtype=F64), 1e-3)
    with pytest.raises(ValueError, match="threshold"):
        nullspace_basis(C0, -1.0)


@pytest.mark.parametrize("solver", [solve_exact, solve_gd], ids=["exact", "gd"])
def test_solvers_reject_bad_inputs(solver) -> None:
    p = make_problem(5, 8, 4, 3)
    good = dict(W=p.W, K_f=p.K_f, M_f=p.M_f, M_n=p.M_n, U0=p.U0)
    nan_W = p.W.clone()
    nan_W[0, 0] = float("nan")
    cases = {
        "K_f": dict(good, K_f=p.K_f[:-1]),
        "M_f": dict(good, M_f=p.M_f[:, :-1]),
        "M_n": dict(good, M_n=p.M_n[:-1]),
        "U0": dict(good, U0=p.U0[:-1]),
        "W": dict(good, W=nan_W),
    }
    for name, kwargs in cases.items():
        with pytest.raises(ValueError, match=name):
            solver(**kwargs)
    with pytest.raises(ValueError, match="c"):
        solver(**good, c=-1.0)
    with pytest.raises(ValueError, match="M_n"):
        solver(**dict(good, M_n=torch.ones(5, 4, dtype=torch.int64)))


def test_exact_solver_rejects_an_unknown_route() -> None:
    p = make_problem(5, 8, 4, 3)
    with pytest.raises(ValueError, match="route"):
        solve_exact(p.W, p.K_f, p.M_f, p.M_n, p.U0, route="fast")  # type: ignore[arg-type]


def test_orthogonality_term_moves_requests_with_nothing_to_forget_more_as_n_grows():
    """Why the scale YAML sets ``orthogonality_weight: 0`` (issue 37): for requests whose target equals their
    current value (``M_n = M_f``: an answer-suppression target of a fact the model does not give), the target
    term asks for no change, but ``a ||M_f^T X||^2`` still pushes the values off ``M_f``, and since it sums over
    pairs of requests its pull grows with n. Without it nothing moves."""
    g = torch.Generator().manual_seed(0)
    d_out, d_in, r = 16, 64, 40
    W = torch.randn(d_out, d_in, generator=g, dtype=torch.float64) / 8
    U0 = torch.linalg.qr(torch.randn(d_in, r, generator=g, dtype=torch.float64))[0]
    moved = []
    for n in (2, 8, 32, 128):
        K = torch.randn(d_in, n, generator=g, dtype=torch.float64)
        M_f = W @ K
        assert solve_exact(W, K, M_f, M_f, U0, a=0.0, b=100.0, c=0.1).abs().max() == 0
        D = solve_exact(W, K, M_f, M_f, U0, a=1.0, b=100.0, c=0.1)
        moved.append(float((D @ K).norm() / M_f.norm()))
    assert moved == sorted(moved) and moved[0] > 0.05 and moved[-1] > 4 * moved[0], moved
