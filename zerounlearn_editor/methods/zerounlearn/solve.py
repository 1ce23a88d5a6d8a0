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
``P = I - V V^T`` removes the span ``V`` of the forget values (SVD of ``M_f^T``).

Because ``M_f = W K_f``, both sides share ``S = u W C0 W^T + r W W^T``:
``(A + r W) W^T = f M_n M_f^T + S`` and ``W (B + r I) W^T = f M_f M_f^T + S``. The solve uses
that form (``[d_out, d_out]`` systems only) and never forms an inverse.
"""
from __future__ import annotations

from typing import Tuple

import torch


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


def forget_projector(M_f: torch.Tensor, rank_tol: float = 1e-6) -> torch.Tensor:
    """``P = I - V V^T`` ``[d_out, d_out]`` (float64)."""
    V = forget_value_basis(M_f, rank_tol)
    return torch.eye(V.shape[0], dtype=torch.float64, device=V.device) - V @ V.t()


def zerounlearn_normal_matrices(
    W: torch.Tensor,
    K_f: torch.Tensor,
    M_n: torch.Tensor,
    C0: torch.Tensor,
    forget_weight: float,
    utility_weight: float,
    regularization: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(lhs, rhs) = (W (B + r I) W^T, (A + r W) W^T)`` of ``D0 lhs = rhs``, float64 ``[d_out, d_out]``."""
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
    lhs = forget_weight * (M_f @ M_f.t()) + shared
    rhs = forget_weight * (M_n.double() @ M_f.t()) + shared
    return 0.5 * (lhs + lhs.t()), rhs


def zerounlearn_multiplier(
    W: torch.Tensor,
    K_f: torch.Tensor,
    M_n: torch.Tensor,
    C0: torch.Tensor,
    forget_weight: float = 1.0,
    utility_weight: float = 15000.0,
    regularization: float = 1.0,
    rank_tol: float = 1e-6,
) -> torch.Tensor:
    """``D`` ``[d_out, d_out]`` (float64) such that ``W' = D W`` unlearns the forget set.

    Solves ``D0 lhs = rhs`` with a Cholesky factorisation (LU if ``lhs`` is not positive
    definite) and returns ``P D0``. Raises :class:`NonFiniteError` on NaN/Inf.
    """
    lhs, rhs = zerounlearn_normal_matrices(W, K_f, M_n, C0, forget_weight, utility_weight, regularization)
    # D0 lhs = rhs  <=>  lhs D0^T = rhs^T  (lhs symmetric)
    factor, info = torch.linalg.cholesky_ex(lhs)
    if int(info) == 0:
        D0 = torch.cholesky_solve(rhs.t().contiguous(), factor).t()
    else:
        D0 = torch.linalg.solve(lhs, rhs.t()).t()
    _check_finite("D (solution of the normal equations)", D0)
    M_f = W.double() @ K_f.double()
    P = forget_projector(M_f, rank_tol)
    D = P @ D0
    _check_finite("D", D)
    return D
