"""ZeroUnlearn's closed-form multiplicative update, as pure float64 tensor functions.

Per edited layer, with ``W`` ``[d_out, d_in]``, forget keys ``K_f`` ``[d_in, n]``,
forget values ``M_f = W K_f`` ``[d_out, n]``, neutral targets ``M_n`` ``[d_out, n]`` and the
utility second moment ``C0 = E[k k^T]`` ``[d_in, d_in]``:

    A = f M_n K_f^T + u W C0               [d_out, d_in]
    B = f K_f K_f^T + u C0                 [d_in, d_in]
    D = P (A + r W) W^T (W (B + r I) W^T)^-1
    W' = D W

``D0 = (A + r W) W^T (W (B + r I) W^T)^-1`` minimises
``f ||D W K_f - M_n||^2 + u ||D W K_0 - W K_0||^2 + r ||D W - W||^2`` (with ``K_0 K_0^T = C0``);
``P = (1 + eps) I - V V^T`` removes the span ``V`` of the forget values (SVD of ``M_f^T``).

Because ``M_f = W K_f``, both sides share ``S = u W C0 W^T + r W W^T``:
``(A + r W) W^T = f M_n M_f^T + S`` and ``W (B + r I) W^T = f M_f M_f^T + S``. The solve uses
that form (``[d_out, d_out]`` systems only) and never forms an inverse.

Retain-aware extension (opt-in; with its weights at 0 the functions compute the paper's method
bit for bit). Retain keys ``K_r`` ``[d_in, n_r]`` with values ``M_r = W K_r`` ``[d_out, n_r]``:

* a retain term ``rho ||D M_r - M_r||^2`` in ``D0``'s objective adds ``rho M_r M_r^T`` to ``S``;
* a retain-aware projector ``P = I - X`` with ``X = F (F + lam_r M_r M_r^T + lam_0 W C0 W^T)^-1``,
  ``F = M_f M_f^T``: the least-squares operator minimising
  ``||M_f - X M_f||^2 + lam_r ||X M_r||^2 + lam_0 ||X W K_0||^2``, i.e. it removes the forget
  values where nothing to keep lives and spares the directions that retain values and general
  text use. With both ``lam`` at 0 it is the paper's ``I - V V^T`` (``X`` = projector onto
  ``span(M_f)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

__all__ = [
    "NonFiniteError",
    "forget_value_basis",
    "forget_projector",
    "retain_aware_projector",
    "zerounlearn_normal_matrices",
    "zerounlearn_multiplier",
    "apply_multiplier",
]


class NonFiniteError(ValueError):
    """An input or result of the solve holds NaN or Inf."""


def _check_finite(name: str, tensor: torch.Tensor) -> None:
    if not torch.isfinite(tensor).all():
        raise NonFiniteError(f"non-finite values in {name} (shape {tuple(tensor.shape)})")


def forget_value_basis(M_f: torch.Tensor, rank_tol: float = 1e-6) -> torch.Tensor:
    """Orthonormal basis ``V`` ``[d_out, k]`` of the span of ``M_f`` ``[d_out, n]``.

    From the SVD ``M_f^T = U S V^T``; singular values below ``rank_tol * max(S)`` are dropped.
    """
    _check_finite("M_f", M_f)
    M = M_f.double()
    _, S, Vh = torch.linalg.svd(M.t(), full_matrices=False)
    if S.numel() == 0 or S[0] == 0:
        return M.new_zeros((M.shape[0], 0))
    keep = S > rank_tol * S[0]
    return Vh[keep].t().contiguous()


def forget_projector(M_f: torch.Tensor, eps: float = 0.0, rank_tol: float = 1e-6) -> torch.Tensor:
    """``P = (1 + eps) I - V V^T`` ``[d_out, d_out]`` (float64)."""
    V = forget_value_basis(M_f, rank_tol)
    eye = torch.eye(V.shape[0], dtype=torch.float64, device=V.device)
    return (1.0 + eps) * eye - V @ V.t()


def retain_aware_projector(
    M_f: torch.Tensor,
    M_r: torch.Tensor,
    WC0W: torch.Tensor,
    retain_weight: float,
    utility_weight: float,
    rank_tol: float = 1e-6,
) -> torch.Tensor:
    """``P = I - F (F + lam_r M_r M_r^T + lam_0 W C0 W^T)^-1`` ``[d_out, d_out]`` (float64).

    ``M_f`` ``[d_out, n]`` forget values, ``M_r`` ``[d_out, n_r]`` retain values (``n_r`` may be
    0), ``WC0W`` ``[d_out, d_out]`` the values' utility second moment ``W C0 W^T``; ``lam_r =
    retain_weight``, ``lam_0 = utility_weight``. With both weights 0 this is the paper's
    projector :func:`forget_projector` (``eps = 0``). The protected matrix gets a ridge of
    ``rank_tol * trace(F) / d_out`` so the solve is well posed when ``F + Sigma`` is singular.
    """
    for name, tensor in (("M_f", M_f), ("M_r", M_r), ("W C0 W^T", WC0W)):
        _check_finite(name, tensor)
    if retain_weight < 0 or utility_weight < 0:
        raise ValueError(f"projector weights must be >= 0, got retain {retain_weight}, utility {utility_weight}")
    if retain_weight == 0 and utility_weight == 0:
        return forget_projector(M_f, 0.0, rank_tol)
    M = M_f.double()
    d_out = M.shape[0]
    F = M @ M.t()
    eye = torch.eye(d_out, dtype=torch.float64, device=M.device)
    protect = utility_weight * WC0W.double() + rank_tol * (F.trace() / d_out) * eye
    if M_r.shape[1] and retain_weight:
        R = M_r.double()
        protect = protect + retain_weight * (R @ R.t())
    system = F + protect
    system = 0.5 * (system + system.t())
    # X = F system^-1  <=>  system X^T = F (both symmetric)
    X = torch.linalg.solve(system, F).t()
    P = eye - X
    _check_finite("P", P)
    return P


@dataclass
class NormalMatrices:
    """``rhs = (A + r W) W^T`` and ``lhs = W (B + r I) W^T``, both ``[d_out, d_out]``."""

    lhs: torch.Tensor
    rhs: torch.Tensor


def zerounlearn_normal_matrices(
    W: torch.Tensor,
    K_f: torch.Tensor,
    M_n: torch.Tensor,
    C0: torch.Tensor,
    forget_weight: float,
    utility_weight: float,
    regularization: float,
    K_r: Optional[torch.Tensor] = None,
    retain_weight: float = 0.0,
) -> NormalMatrices:
    """The two sides of ``D0 lhs = rhs`` in float64 (see module docstring).

    ``K_r`` ``[d_in, n_r]`` and ``retain_weight`` (rho) add the retain term ``rho M_r M_r^T``
    to both sides; absent or 0, the paper's matrices are returned unchanged.
    """
    for name, tensor in (("W", W), ("K_f", K_f), ("M_n", M_n), ("C0", C0)):
        _check_finite(name, tensor)
    d_out, d_in = W.shape
    if K_f.shape[0] != d_in or M_n.shape != (d_out, K_f.shape[1]) or C0.shape != (d_in, d_in):
        raise ValueError(
            f"shape mismatch: W {tuple(W.shape)}, K_f {tuple(K_f.shape)}, M_n {tuple(M_n.shape)}, C0 {tuple(C0.shape)}"
        )
    W = W.double()
    M_f = W @ K_f.double()
    shared = utility_weight * (W @ C0.double().to(W.device) @ W.t()) + regularization * (W @ W.t())
    if K_r is not None and K_r.shape[1] and retain_weight:
        _check_finite("K_r", K_r)
        if K_r.shape[0] != d_in:
            raise ValueError(f"shape mismatch: W {tuple(W.shape)}, K_r {tuple(K_r.shape)}")
        M_r = W @ K_r.double().to(W.device)
        shared = shared + retain_weight * (M_r @ M_r.t())
    lhs = forget_weight * (M_f @ M_f.t()) + shared
    rhs = forget_weight * (M_n.double() @ M_f.t()) + shared
    lhs = 0.5 * (lhs + lhs.t())
    return NormalMatrices(lhs=lhs, rhs=rhs)


def zerounlearn_multiplier(
    W: torch.Tensor,
    K_f: torch.Tensor,
    M_n: torch.Tensor,
    C0: torch.Tensor,
    forget_weight: float = 1.0,
    utility_weight: float = 15000.0,
    regularization: float = 1.0,
    projection_eps: float = 0.0,
    rank_tol: float = 1e-6,
    K_r: Optional[torch.Tensor] = None,
    retain_weight: float = 0.0,
    projection_retain_weight: float = 0.0,
    projection_utility_weight: float = 0.0,
) -> torch.Tensor:
    """``D`` ``[d_out, d_out]`` (float64) such that ``W' = D W`` unlearns the forget set.

    Solves ``D0 lhs = rhs`` with a Cholesky factorisation (LU if ``lhs`` is not positive
    definite) and returns ``P D0``. Raises :class:`NonFiniteError` on NaN/Inf.

    Retain-aware options (see module docstring): ``K_r`` ``[d_in, n_r]`` retain keys,
    ``retain_weight`` (rho, in ``D0``), ``projection_retain_weight`` / ``projection_utility_weight``
    (lam_r / lam_0 of :func:`retain_aware_projector`, which then replaces the paper's projector;
    ``projection_eps`` applies to the paper's projector only). All 0: the paper's ``D``.
    """
    mats = zerounlearn_normal_matrices(
        W, K_f, M_n, C0, forget_weight, utility_weight, regularization, K_r=K_r, retain_weight=retain_weight
    )
    # D0 lhs = rhs  <=>  lhs D0^T = rhs^T  (lhs symmetric)
    factor, info = torch.linalg.cholesky_ex(mats.lhs)
    if int(info) == 0:
        D0 = torch.cholesky_solve(mats.rhs.t().contiguous(), factor).t()
    else:
        D0 = torch.linalg.solve(mats.lhs, mats.rhs.t()).t()
    _check_finite("D (solution of the normal equations)", D0)
    M_f = W.double() @ K_f.double()
    if projection_retain_weight or projection_utility_weight:
        Wd = W.double()
        M_r = Wd @ K_r.double().to(Wd.device) if K_r is not None else Wd.new_zeros((Wd.shape[0], 0))
        WC0W = Wd @ C0.double().to(Wd.device) @ Wd.t()
        P = retain_aware_projector(M_f, M_r, WC0W, projection_retain_weight, projection_utility_weight, rank_tol)
    else:
        P = forget_projector(M_f, projection_eps, rank_tol)
    D = P @ D0
    _check_finite("D", D)
    return D


def apply_multiplier(D: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``W' = D W`` ``[d_out, d_in]`` in float64."""
    return D.double() @ W.double()
