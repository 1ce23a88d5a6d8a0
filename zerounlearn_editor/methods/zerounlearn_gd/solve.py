"""The per-layer mathematics of ZeroUnlearn-GD (additive, null-space-projected update).

Setting for one edited layer (all shapes in the *mathematical* orientation, ``value = W @ key``):

* ``W``   ``[d_out, d_in]``  the weight being edited,
* ``K_f`` ``[d_in, n]``      forget keys (one column per forget sample),
* ``M_f`` ``[d_out, n]``     forget values, normally ``W @ K_f``,
* ``M_n`` ``[d_out, n]``     neutral target values,
* ``C0``  ``[d_in, d_in]``   utility second moment ``E[k k^T]`` (symmetric PSD).

The update is ``W' = W + D_m`` with ``D_m = E P_m``, where ``P_m = U0 U0^T`` projects onto the
(numerical) null space of ``C0``: ``U0`` ``[d_in, r]`` holds the eigenvectors of ``C0`` whose
eigenvalues lie below an absolute threshold (as AlphaEdit does). ``D_m k ~ 0`` for every key
``k`` in the range of ``C0``, so utility activations are (approximately) left untouched.

Objective, Frobenius norms, weights ``a, b, c >= 0``::

    J(E) = a ||M_f^T (W + E P_m) K_f||^2 + b ||(W + E P_m) K_f - M_n||^2 + c ||E P_m||^2

Only ``F = E U0`` ``[d_out, r]`` matters (``E P_m = F U0^T``; since ``U0`` has orthonormal
columns, ``||E P_m|| = ||F||``). With ``Kt = U0^T K_f`` ``[r, n]`` and ``X = W K_f + F Kt``::

    J(F)  = a ||M_f^T X||^2 + b ||X - M_n||^2 + c ||F||^2
    dJ/dF = 2 [ (a M_f M_f^T X + b (X - M_n)) Kt^T + c F ]
          = 2 [ Q F G + c F - Z ]

with ``Q = a M_f M_f^T + b I`` ``[d_out, d_out]``, ``G = Kt Kt^T`` ``[r, r]`` and
``Z = (b M_n - Q W K_f) Kt^T = (b M_n K_f^T - Q W K_f K_f^T) U0`` ``[d_out, r]``. The objective
is a convex quadratic in ``F``; its minimisers solve the Sylvester-type equation
``Q F G + c F = Z``. With ``Q = Uq diag(q) Uq^T`` and ``G = Ug diag(g) Ug^T`` it decouples
elementwise: ``F = Uq [ (Uq^T Z Ug) / (q g^T + c) ] Ug^T``.

:func:`solve_exact` evaluates this closed form; :func:`solve_gd` minimises the same objective
iteratively (Adam, then linear conjugate gradient). Everything is a pure function of tensors.

**Text-weighted null-space penalty** (opt-in, ``nullspace_text_weight: w``; ``w = 0`` is the
paper). ``U0``'s columns are eigenvectors of ``C0`` with eigenvalues ``e_j`` below the threshold ``t``, so the
edit's change of the layer's output on the statistics' text is ``tr(D_m C0 D_m^T) = sum_j e_j ||F_:,j||^2``. The
isotropic ``c ||F||^2`` becomes ``c sum_j (1 + w e_j / t) ||F_:,j||^2 = c ||F S^{-1}||^2`` with ``S = diag(s)``,
``s_j = (1 + w e_j / t)^{-1/2}``. Writing ``F = F' S``: ``E P_m = F U0^T = F' (U0 S)^T`` and ``F Kt = F' (U0
S)^T K_f``, so ``J`` in ``F'`` is the objective above with ``U0`` replaced by ``U0 S`` and the isotropic
``c ||F'||^2``. Its stationarity condition ``Q F' G' + c F' = Z'`` has ``G' = S G S`` and ``Z' = Z S``; in ``F``
it is ``Q F G + F diag(c (1 + w e / t)) = Z``. :func:`text_weighted_basis` returns ``U0 S``; either solver given
it returns the minimiser ``D_m = F' (U0 S)^T`` of the weighted objective (neither needs orthonormal columns).
The ``{key_reach: A}`` form chooses ``w`` from the forget keys: :func:`key_reach` ``A(w) = (b / c) sum_j s_j / (1 +
w e_j / t) / n`` (``s_j = ||u_j^T K_f||^2``; one fact with ``a = 0``: the layer writes ``A / (1 + A)`` of its asked
value change) and :func:`relative_text_weight`, the ``w`` with ``A(w) = A``.
"""
from __future__ import annotations

import logging
import math
from collections import deque
from typing import Deque, Literal, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

Route = Literal["auto", "dense", "lowrank"]

_F64 = torch.float64

# Conjugate gradient: every this many iterations the residual is recomputed from the gradient.
_CG_REFRESH = 50
# solve_gd's stopping rule looks back this many steps; progress is logged every _LOG_EVERY steps.
_WINDOW = 20
_LOG_EVERY = 200
# nullspace_basis refuses a C0 with max|C0 - C0^T| above this times max(1, max|C0|).
_SYMMETRY_TOL = 1e-6


def _check_matrix(name: str, x: object) -> Tensor:
    """Check that ``x`` is a finite, floating-point 2-D tensor; return it."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must have a floating-point dtype, got {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


def _check_weight(name: str, value: float) -> float:
    """Check that an objective weight is a finite real number >= 0; return it as float."""
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real number, got {value!r}") from exc
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return v


def _check_problem(
    W: Tensor, K_f: Tensor, M_f: Tensor, M_n: Tensor, a: float, b: float, c: float
) -> Tuple[int, int, int, float, float, float]:
    """Validate the per-layer problem; return ``(d_out, d_in, n, a, b, c)``."""
    for name, x in (("W", W), ("K_f", K_f), ("M_f", M_f), ("M_n", M_n)):
        _check_matrix(name, x)
    d_out, d_in = W.shape
    if K_f.shape[0] != d_in:
        raise ValueError(f"K_f must have shape [d_in={d_in}, n], got {tuple(K_f.shape)}")
    n = K_f.shape[1]
    for name, x in (("M_f", M_f), ("M_n", M_n)):
        if tuple(x.shape) != (d_out, n):
            raise ValueError(f"{name} must have shape [d_out={d_out}, n={n}], got {tuple(x.shape)}")
    return d_out, d_in, n, _check_weight("a", a), _check_weight("b", b), _check_weight("c", c)


def _check_basis(U0: Tensor, d_in: int) -> Tensor:
    """Validate the null-space basis ``U0`` ``[d_in, r]`` (r may be 0)."""
    _check_matrix("U0", U0)
    if U0.shape[0] != d_in:
        raise ValueError(f"U0 must have shape [d_in={d_in}, r], got {tuple(U0.shape)}")
    return U0


def protected_covariance(
    C0: Tensor,
    K_r: Optional[Tensor],
    weight: float,
    C_ctx: Optional[Tensor] = None,
    context_weight: float = 0.0,
) -> Tensor:
    """``C0 + weight * K_r K_r^T / n_r + context_weight * C_ctx`` ``[d_in, d_in]``: keys the null space avoids.

    Retain-aware ZeroUnlearn-GD (opt-in): ``K_r`` ``[d_in, n_r]`` are the retain keys, ``C_ctx``
    ``[d_in, d_in]`` the mean ``k k^T`` of the prompts' context positions (every token but the
    subject's last). Returns ``C0`` itself (same object) when nothing is added.
    """
    _check_matrix("C0", C0)
    weight = _check_weight("retain null-space weight", weight)
    context_weight = _check_weight("context null-space weight", context_weight)
    out = C0
    if K_r is not None and K_r.shape[1] and weight:
        _check_matrix("K_r", K_r)
        if K_r.shape[0] != C0.shape[0]:
            raise ValueError(f"K_r must have shape [d_in={C0.shape[0]}, n_r], got {tuple(K_r.shape)}")
        K = K_r.to(device=C0.device, dtype=_F64)
        out = out.to(_F64) + (weight / K.shape[1]) * (K @ K.T)
    if C_ctx is not None and context_weight:
        _check_matrix("C_ctx", C_ctx)
        if C_ctx.shape != C0.shape:
            raise ValueError(f"C_ctx must have shape {tuple(C0.shape)}, got {tuple(C_ctx.shape)}")
        out = out.to(_F64) + context_weight * C_ctx.to(device=C0.device, dtype=_F64)
    return out


def symmetric_eigenpairs(C0: Tensor) -> Tuple[Tensor, Tensor]:
    """Eigenvalues ``[d_in]`` (ascending) and eigenvectors ``[d_in, d_in]`` (columns) of ``C0``, float64.

    ``C0`` ``[d_in, d_in]`` is cast to float64 and symmetrised (``(C + C^T) / 2``) before ``eigh``. Raises
    ``ValueError`` for a non-finite, non-square or non-symmetric ``C0``.
    """
    _check_matrix("C0", C0)
    if C0.shape[0] != C0.shape[1]:
        raise ValueError(f"C0 must be square [d_in, d_in], got {tuple(C0.shape)}")
    C = C0.to(_F64)
    asym = float((C - C.T).abs().max()) if C.numel() else 0.0
    scale = max(1.0, float(C.abs().max())) if C.numel() else 1.0
    if asym > _SYMMETRY_TOL * scale:
        raise ValueError(
            f"C0 must be symmetric: max|C0 - C0^T| = {asym:.3g} exceeds {_SYMMETRY_TOL:g} * {scale:.3g}"
        )
    evals, evecs = torch.linalg.eigh(0.5 * (C + C.T))
    return evals, evecs


def nullspace_split(evals: Tensor, evecs: Tensor, threshold: float) -> Tuple[Tensor, Tensor]:
    """``(U0, U1)`` from the eigenpairs of :func:`symmetric_eigenpairs`: the eigenvectors ``evecs`` ``[d_in,
    d_in]`` whose eigenvalue in ``evals`` ``[d_in]`` lies strictly below the *absolute* ``threshold`` form
    ``U0`` ``[d_in, r]`` (``r`` may be 0), the others ``U1`` ``[d_in, d_in - r]``. Raises ``ValueError`` for a
    bad threshold."""
    thr = _check_weight("threshold", threshold)
    d_in = evals.shape[0]
    below = evals < thr
    r = int(below.sum())
    logger.debug(
        "nullspace_basis: d_in=%d, threshold=%g, null-space rank r=%d, eigenvalues in [%.3g, %.3g]",
        d_in, thr, r, float(evals[0]) if d_in else float("nan"), float(evals[-1]) if d_in else float("nan"),
    )
    if r == 0:
        logger.warning("nullspace_basis: no eigenvalue of C0 below %g; the update will be zero", thr)
    return evecs[:, below].contiguous(), evecs[:, ~below].contiguous()


def null_eigenpairs(evals: Tensor, evecs: Tensor, threshold: float) -> Tuple[Tensor, Tensor]:
    """``(U0, e0)``: ``U0`` ``[d_in, r]`` as :func:`nullspace_split` gives it and the eigenvalues ``e0`` ``[r]``
    (ascending, those of ``evals`` strictly below ``threshold``) of its columns."""
    U0, _ = nullspace_split(evals, evecs, threshold)
    return U0, evals[evals < float(threshold)]


def nullspace_with_eigenvalues(C0: Tensor, threshold: float) -> Tuple[Tensor, Tensor]:
    """``(U0, e0)`` of ``C0`` ``[d_in, d_in]``: :func:`nullspace_basis`'s ``U0`` ``[d_in, r]`` (the same bits) and its
    columns' eigenvalues ``e0`` ``[r]`` (:func:`null_eigenpairs`)."""
    _check_weight("threshold", threshold)
    return null_eigenpairs(*symmetric_eigenpairs(C0), threshold)


def text_weighted_basis(U0: Tensor, null_evals: Tensor, text_weight: float, threshold: float) -> Tensor:
    """``U0 diag(s)`` ``[d_in, r]`` float64, ``s_j = (1 + text_weight * e_j / threshold)^(-1/2)``.

    Given to :func:`solve_exact` or :func:`solve_gd` in place of ``U0`` it makes the penalty ``c sum_j (1 + w e_j /
    t) ||F_:,j||^2`` (module docstring): each null direction costs ``c`` plus ``c w / t`` times its text variance.
    ``U0`` ``[d_in, r]`` orthonormal eigenvectors of the protected covariance, ``null_evals`` ``[r]`` their
    eigenvalues (negative rounding noise counts as 0), ``threshold`` the null space's threshold (> 0 when
    ``text_weight > 0``). ``text_weight == 0`` gives ``U0`` in float64, unchanged. Raises ``ValueError`` on bad
    shapes or values.
    """
    _check_matrix("U0", U0)
    w = _check_weight("nullspace text weight", text_weight)
    thr = _check_weight("threshold", threshold)
    if not isinstance(null_evals, Tensor) or null_evals.dim() != 1 or null_evals.shape[0] != U0.shape[1]:
        shape = tuple(null_evals.shape) if isinstance(null_evals, Tensor) else type(null_evals).__name__
        raise ValueError(f"null_evals must be a 1-D tensor of U0's r={U0.shape[1]} eigenvalues, got {shape}")
    if not bool(torch.isfinite(null_evals).all()):
        raise ValueError("null_evals contains NaN or infinite values")
    if w > 0 and thr <= 0:
        raise ValueError(f"a nullspace text weight of {w:g} needs a threshold > 0, got {threshold!r}")
    U = U0.to(_F64)
    if w == 0:
        return U
    e = null_evals.to(device=U.device, dtype=_F64).clamp_min(0.0)
    return U * (1.0 + (w / thr) * e).rsqrt()[None, :]


# relative_text_weight: bisection on log(w) over [1e-12, _MAX_REL_WEIGHT]; _BISECT_STEPS halvings of that range.
_MAX_REL_WEIGHT = 1e6
_BISECT_STEPS = 60


def key_reach(Kt: Tensor, x: Tensor, text_weight: float, b: float, c: float, facts: Optional[int] = None) -> float:
    """``A(w) = (b / c) sum_j s_j / (1 + w x_j) / n``: the forget keys' null-space energy against the penalty.

    ``Kt = U0^T K_f`` ``[r, m]`` (the forget keys on the null directions), ``x`` ``[r]`` the directions' text
    variances over the threshold (``e_j / t``, in [0, 1)), ``s_j = ||Kt_j,:||^2``; ``n`` = ``facts``, the number of
    facts whose columns ``Kt`` holds (default ``m``; with ``quantized_forget_keys`` each fact has two
    columns, its key and its twin's, and both count towards its reach). For one fact and ``a = 0`` the weighted
    solve writes ``A / (1 + A)`` of the value change asked of the layer (notebook
    2026-11-30-gemma-textweight-rule.md); ``w = 0`` gives the paper's ``A0 = (b / c) ||Kt||^2 / n``.
    """
    s = Kt.to(_F64).square().sum(dim=1)
    n = max(int(Kt.shape[1]) if facts is None else int(facts), 1)
    return float((b / c) * (s / (1.0 + text_weight * x.to(_F64))).sum() / n)


def relative_text_weight(Kt: Tensor, x: Tensor, reach: float, b: float, c: float,
                         facts: Optional[int] = None) -> float:
    """The text weight ``w >= 0`` whose :func:`key_reach` is ``reach``; 0 when the paper's ``A0 <= reach``.

    ``A(w)`` falls monotonically with ``w`` (from ``A0`` towards ``(b / c) sum_{x_j = 0} s_j / n``); the answer is
    found by bisection on ``log w`` to ``1e-12`` relative, capped at ``1e6`` (returned when even that keeps ``A``
    above ``reach``). ``Kt`` ``[r, m]``, ``x`` ``[r]``, ``facts`` as in :func:`key_reach`; ``reach > 0``, ``b >= 0``,
    ``c > 0``.
    Raises ``ValueError`` on bad shapes or values.
    """
    _check_matrix("Kt", Kt)
    if not isinstance(x, Tensor) or x.dim() != 1 or x.shape[0] != Kt.shape[0]:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a 1-D tensor of Kt's r={Kt.shape[0]} text variances, got {shape}")
    if not bool(torch.isfinite(x).all()) or bool((x < 0).any()):
        raise ValueError("x must be finite and >= 0")
    reach = _check_weight("reach", reach)
    b, c = _check_weight("b", b), _check_weight("c", c)
    if reach <= 0 or c <= 0:
        raise ValueError(f"relative_text_weight needs reach > 0 and c > 0, got reach={reach!r}, c={c!r}")
    if key_reach(Kt, x, 0.0, b, c, facts) <= reach:
        return 0.0
    if key_reach(Kt, x, _MAX_REL_WEIGHT, b, c, facts) > reach:
        return _MAX_REL_WEIGHT
    lo, hi = -12.0 * math.log(10.0), math.log(_MAX_REL_WEIGHT)
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if key_reach(Kt, x, math.exp(mid), b, c, facts) > reach:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


def nullspace_basis(C0: Tensor, threshold: float) -> Tuple[Tensor, Tensor]:
    """Orthonormal bases of the numerical null space of ``C0`` and of its complement.

    ``C0`` ``[d_in, d_in]`` is symmetrised and eigendecomposed in float64 (:func:`symmetric_eigenpairs`);
    eigenvectors with eigenvalue strictly below the *absolute* ``threshold`` form ``U0`` ``[d_in, r]`` (``P_m =
    U0 U0^T``; ``r`` may be 0), the others ``U1`` ``[d_in, d_in - r]`` (:func:`nullspace_split`). Returns
    ``(U0, U1)``. Raises ``ValueError`` for a non-finite, non-square or non-symmetric ``C0`` or a bad threshold.
    """
    _check_weight("threshold", threshold)
    return nullspace_split(*symmetric_eigenpairs(C0), threshold)


# ----------------------------------------------------------------------------------------------
# Objective and gradient in F
# ----------------------------------------------------------------------------------------------


class _Pieces(NamedTuple):
    """Precomputed, dtype-cast quantities shared by the objective, its gradient and Hessian products."""

    WK: Tensor             # [d_out, n]  W K_f
    Kt: Tensor             # [r, n]      U0^T K_f
    M_f: Tensor            # [d_out, n]
    M_n: Tensor            # [d_out, n]
    S: Optional[Tensor]    # [d_out, d_out] M_f M_f^T when forming it is cheaper, else None


def _prepare(W: Tensor, K_f: Tensor, M_f: Tensor, M_n: Tensor, U0: Tensor, repeated: bool) -> _Pieces:
    """Cast to float64 and precompute ``W K_f``, ``U0^T K_f`` and, if it pays, ``M_f M_f^T``.

    ``repeated``: the products with ``M_f M_f^T`` will be taken many times (iterative solver),
    so forming the ``[d_out, d_out]`` Gram matrix pays off when ``d_out <= n``.
    """
    K = K_f.to(_F64)
    Mf = M_f.to(_F64)
    S = Mf @ Mf.T if repeated and Mf.shape[0] <= Mf.shape[1] else None
    return _Pieces(WK=W.to(_F64) @ K, Kt=U0.to(_F64).T @ K, M_f=Mf, M_n=M_n.to(_F64), S=S)


def _apply_S(p: _Pieces, X: Tensor) -> Tensor:
    """``M_f M_f^T X`` ``[d_out, m]`` for ``X`` ``[d_out, m]``, cheapest way round."""
    return p.S @ X if p.S is not None else p.M_f @ (p.M_f.T @ X)


def _objective_and_gradient(p: _Pieces, F: Tensor, a: float, b: float, c: float) -> Tuple[Tensor, Tensor]:
    """Objective ``J(F)`` (0-d tensor) and gradient ``dJ/dF`` ``[d_out, r]``; ``F`` ``[d_out, r]``."""
    X = p.WK + F @ p.Kt                   # [d_out, n]
    SX = _apply_S(p, X)                   # [d_out, n]
    resid = X - p.M_n                     # [d_out, n]
    grad = 2.0 * ((a * SX + b * resid) @ p.Kt.T + c * F)
    # a ||M_f^T X||^2 = a <X, M_f M_f^T X>: no cancellation, both factors are exact products.
    value = a * (X * SX).sum() + b * resid.square().sum() + c * F.square().sum()
    return value, grad


def _hessian_apply(p: _Pieces, P: Tensor, a: float, b: float, c: float) -> Tensor:
    """Hessian of ``J(F)`` applied to a direction ``P`` ``[d_out, r]``: ``2 (Q P G + c P)``."""
    Y = P @ p.Kt
    return 2.0 * ((a * _apply_S(p, Y) + b * Y) @ p.Kt.T + c * P)


# ----------------------------------------------------------------------------------------------
# Exact solver
# ----------------------------------------------------------------------------------------------


def _key_basis(Kt: Tensor, thin: bool) -> Tuple[Tensor, Tensor]:
    """Orthonormal right basis ``B`` ``[r, k]`` and eigenvalues ``g`` ``[k]`` of ``G = Kt Kt^T``.

    Thin: SVD ``Kt = B diag(s) V^T``, ``g = s^2``, ``k = min(r, n)``; the orthogonal complement
    of ``B`` is exactly the null space of ``G``. Dense: ``eigh(G)``, keeping the ``k <= r``
    eigenvectors whose eigenvalue exceeds ``r * eps * max(g)``: eigenvalues below that are
    rounding noise of zero, and since ``Z`` lies exactly in ``range(G)`` the solution has no
    component there. (Keeping them would divide rounding noise of ``Z`` by ``c`` alone.)
    """
    if thin:
        B, s, _ = torch.linalg.svd(Kt, full_matrices=False)
        return B, s.square()
    g, B = torch.linalg.eigh(Kt @ Kt.T)
    g_max = float(g.max()) if g.numel() else 0.0
    keep = g > Kt.shape[0] * torch.finfo(g.dtype).eps * g_max
    return B[:, keep], g[keep]


def _value_solve(
    ZB: Tensor, g: Tensor, M_f: Tensor, a: float, b: float, c: float, thin: bool, rcond: float
) -> Tensor:
    """Solve ``Q F_B diag(g) + c F_B = ZB`` for ``F_B`` ``[d_out, k]`` (pseudo-inverse semantics).

    ``Q = a M_f M_f^T + b I``. Dense: ``eigh(Q)``. Thin: the SVD ``M_f = Um diag(s) V^T``
    (``Um`` ``[d_out, min(d_out, n)]``) gives ``Q``'s eigenpairs ``(b + a s^2, Um)`` plus
    eigenvalue ``b`` on the orthogonal complement of ``Um``, so ``Q`` is never formed.
    Decoupled denominators ``q_i g_j + c`` at or below ``rcond * max`` are treated as zero,
    and so are the corresponding solution components.
    """
    g_max = float(g.max()) if g.numel() else 0.0

    def divide(num: Tensor, q: Tensor, scale: float) -> Tensor:
        denom = q[:, None] * g[None, :] + c
        keep = denom > rcond * scale
        return torch.where(keep, num / torch.where(keep, denom, torch.ones_like(denom)), torch.zeros_like(num))

    if thin:
        Um, s, _ = torch.linalg.svd(M_f, full_matrices=False)
        q = b + a * s.square()
        q_max = max(float(q.max()) if q.numel() else b, b)
        scale = q_max * g_max + c
        coef = Um.T @ ZB                                  # [m, k]
        out = Um @ divide(coef, q, scale)
        if Um.shape[1] < Um.shape[0]:
            rest = ZB - Um @ coef                         # component where Q acts as b I
            q_rest = torch.full((1,), b, dtype=ZB.dtype, device=ZB.device)
            out = out + divide(rest, q_rest.expand(rest.shape[0]), scale)
        return out
    Qm = a * (M_f @ M_f.T)
    Qm.diagonal().add_(b)
    q, Uq = torch.linalg.eigh(Qm)
    q = q.clamp_min(0.0)
    scale = (float(q.max()) if q.numel() else 0.0) * g_max + c
    return Uq @ divide(Uq.T @ ZB, q, scale)


def solve_exact(
    W: Tensor,
    K_f: Tensor,
    M_f: Tensor,
    M_n: Tensor,
    U0: Tensor,
    a: float = 1.0,
    b: float = 100.0,
    c: float = 0.1,
    *,
    route: Route = "auto",
) -> Tensor:
    """Closed-form minimiser ``D_m = F U0^T`` ``[d_out, d_in]`` (float64) of the ZeroUnlearn-GD objective.

    Solves ``Q F G + c F = Z`` (module docstring) by decoupling the key side (:func:`_key_basis`) and the
    value side (:func:`_value_solve`), each dense or thin: ``route="auto"`` takes the thin variant on each side
    where it is smaller, ``"dense"`` and ``"lowrank"`` force one on both sides (they agree to rounding).
    Decoupled components whose denominator ``q_i g_j + c`` is at most ``max(d_out, r, n) * eps(float64)`` times
    the largest are set to zero (the minimum-norm minimiser of a singular system, e.g. ``c == 0`` with ``n <
    r``). ``U0`` ``[d_in, r]`` from :func:`nullspace_basis` or :func:`text_weighted_basis` (``r == 0`` gives
    zeros). Raises ``ValueError`` on
    bad shapes, non-finite entries, negative weights or an unknown route.
    """
    d_out, d_in, n, a, b, c = _check_problem(W, K_f, M_f, M_n, a, b, c)
    U0 = _check_basis(U0, d_in)
    if route not in ("auto", "dense", "lowrank"):
        raise ValueError(f"route must be 'auto', 'dense' or 'lowrank', got {route!r}")
    r = U0.shape[1]
    if r == 0 or n == 0:
        logger.debug("solve_exact: r=%d, n=%d: update is zero", r, n)
        return torch.zeros(d_out, d_in, dtype=_F64, device=W.device)
    rcond = max(d_out, r, n) * torch.finfo(_F64).eps

    pieces = _prepare(W, K_f, M_f, M_n, U0, repeated=False)
    Kt, M_f64 = pieces.Kt, pieces.M_f
    thin_keys = route == "lowrank" or (route == "auto" and n < r)
    thin_values = route == "lowrank" or (route == "auto" and n < d_out)
    logger.debug(
        "solve_exact: d_out=%d d_in=%d n=%d r=%d, key side %s, value side %s",
        d_out, d_in, n, r, "thin" if thin_keys else "dense", "thin" if thin_values else "dense",
    )

    Y = b * (pieces.M_n - pieces.WK) - a * _apply_S(pieces, pieces.WK)  # [d_out, n], Z = Y Kt^T
    B, g = _key_basis(Kt, thin_keys)                     # [r, k], [k]
    ZB = Y @ (Kt.T @ B)                                  # [d_out, k] = Z B
    F_B = _value_solve(ZB, g, M_f64, a, b, c, thin_values, rcond)  # F = F_B B^T

    U0_64 = U0.to(_F64)
    k = B.shape[1]
    # D_m = F_B (U0 B)^T or (F_B B^T) U0^T, whichever multiplies fewer numbers.
    cost_left = d_in * r * k + d_out * k * d_in
    cost_right = d_out * k * r + d_out * r * d_in
    if cost_left <= cost_right:
        return F_B @ (U0_64 @ B).T
    return (F_B @ B.T) @ U0_64.T


# ----------------------------------------------------------------------------------------------
# Iterative solver
# ----------------------------------------------------------------------------------------------


def _stalled(history: Sequence[float], tolerance: float) -> bool:
    """True when the objective moved by at most ``tolerance`` (relative) over the last ``_WINDOW`` steps."""
    if len(history) <= _WINDOW:
        return False
    change = abs(history[-1 - _WINDOW] - history[-1])
    return change <= tolerance * max(abs(history[-1]), 1e-300)


def _check_gd_settings(steps: int, cg_steps: Optional[int], lr: float, tolerance: float) -> Tuple[int, float]:
    """``(cg_steps, tolerance)`` checked (``cg_steps`` None: ``steps``); ``ValueError`` naming a bad setting."""
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if cg_steps is None:
        cg_steps = steps
    if int(cg_steps) != cg_steps or cg_steps < 0:
        raise ValueError(f"cg_steps must be an integer >= 0, got {cg_steps!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    return cg_steps, _check_weight("tolerance", tolerance)


def _adam_phase(p: _Pieces, F: Tensor, a: float, b: float, c: float, steps: int, base_lr: float,
                loss_scale: float, tolerance: float) -> Tensor:
    """Phase 1 of :func:`solve_gd`: at most ``steps`` Adam steps on ``J(F) * loss_scale`` from ``F``
    ``[d_out, r]``, step size ``base_lr`` cosine-decayed to 0; stops once ``J`` stalled. Returns ``F``."""
    beta1, beta2 = 0.9, 0.999
    eps = 1e-12
    m = torch.zeros_like(F)
    v = torch.zeros_like(F)
    history: Deque[float] = deque(maxlen=_WINDOW + 1)
    for t in range(1, steps + 1):
        value_t, grad = _objective_and_gradient(p, F, a, b, c)
        history.append(float(value_t))
        if _stalled(history, tolerance):
            logger.debug("solve_gd adam: objective stalled at step %d", t)
            break
        grad = grad * loss_scale
        m.mul_(beta1).add_(grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_lr = base_lr * 0.5 * (1.0 + math.cos(math.pi * (t - 1) / steps))
        m_hat = m / (1 - beta1 ** t)
        v_hat = v / (1 - beta2 ** t)
        F = F - step_lr * m_hat / (v_hat.sqrt() + eps)
        if t % _LOG_EVERY == 0:
            logger.debug("solve_gd adam step %d: J=%.12g lr=%.3g", t, history[-1], step_lr)
    return F


def _cg_phase(p: _Pieces, F: Tensor, start: Tuple[Tensor, Tensor], a: float, b: float, c: float, cg_steps: int,
              tolerance: float) -> Tensor:
    """Phase 2 of :func:`solve_gd`: at most ``cg_steps`` iterations of linear conjugate gradient on the same
    quadratic from ``F`` ``[d_out, r]`` (``start``: ``J`` and its gradient there; Hessian products
    ``2 (Q P G + c P)``, the residual refreshed from the true gradient every ``_CG_REFRESH`` iterations); stops
    once ``J`` stalled. Returns ``F``."""
    value_t, grad = start
    history: Deque[float] = deque([float(value_t)], maxlen=_WINDOW + 1)
    res = -grad
    direction = res.clone()
    rr = float(res.square().sum())
    for it in range(1, cg_steps + 1):
        if rr == 0.0:
            break
        Hd = _hessian_apply(p, direction, a, b, c)
        dHd = float((direction * Hd).sum())
        if not dHd > 0:
            break
        alpha = rr / dHd
        F = F + alpha * direction
        if it % _CG_REFRESH == 0:
            # Replace the recurred residual by the true negative gradient (limits drift).
            value_t, grad = _objective_and_gradient(p, F, a, b, c)
            res = -grad
            history.append(float(value_t))
        else:
            res = res - alpha * Hd
            # Exact decrease of the quadratic along the line: alpha * <res_old, d> / 2 = alpha rr / 2.
            history.append(history[-1] - 0.5 * alpha * rr)
        rr_new = float(res.square().sum())
        direction = res + (rr_new / rr) * direction
        rr = rr_new
        if it % _LOG_EVERY == 0:
            logger.debug("solve_gd cg iteration %d: J=%.12g |grad|^2=%.3g", it, history[-1], rr)
        if _stalled(history, tolerance):
            logger.debug("solve_gd cg: objective stalled at iteration %d", it)
            break
    return F


def solve_gd(
    W: Tensor,
    K_f: Tensor,
    M_f: Tensor,
    M_n: Tensor,
    U0: Tensor,
    a: float = 1.0,
    b: float = 100.0,
    c: float = 0.1,
    steps: int = 2000,
    lr: float = 0.1,
    tolerance: float = 1e-10,
    *,
    cg_steps: Optional[int] = None,
) -> Tensor:
    """Minimise the ZeroUnlearn-GD objective over ``F`` ``[d_out, r]`` iteratively; return ``D_m = F U0^T``.

    No closed form inside, two phases on ``J(F)``:

    1. **Adam**, at most ``steps`` steps from ``F = 0``, cosine-decayed step size. The loss is divided by
       ``J(0)``, and ``lr`` is relative to the scale of ``F``'s entries, the RMS of
       ``Z / (mean(q) mean(g) + c)`` (computed from traces), so one ``lr`` suits any weight.
    2. **Linear conjugate gradient** on the same quadratic, at most ``cg_steps`` iterations
       (default ``steps``; 0 runs Adam only), using Hessian products ``2 (Q P G + c P)``; it
       removes the objective gap Adam alone leaves.

    Each phase stops once the objective moved by at most ``tolerance * |J|`` over the last
    ``_WINDOW`` steps, or when the gradient vanishes. Deterministic. ``W``, ``K_f``, ``M_f``,
    ``M_n``, ``U0``, ``a``, ``b``, ``c`` as in :func:`solve_exact`; float64 throughout. Returns ``D_m``
    ``[d_out, d_in]`` float64 on ``W``'s device (zeros when ``r == 0``). Raises ``ValueError`` on invalid
    inputs or settings.
    """
    d_out, d_in, n, a, b, c = _check_problem(W, K_f, M_f, M_n, a, b, c)
    U0 = _check_basis(U0, d_in)
    cg_steps, tolerance = _check_gd_settings(steps, cg_steps, lr, tolerance)
    r = U0.shape[1]
    if r == 0 or n == 0:
        logger.debug("solve_gd: r=%d, n=%d: update is zero", r, n)
        return torch.zeros(d_out, d_in, dtype=_F64, device=W.device)

    pieces = _prepare(W, K_f, M_f, M_n, U0, repeated=True)
    F = torch.zeros(d_out, r, dtype=_F64, device=W.device)

    # Scale of F for the relative learning rate: the RMS entry of the minimiser of the scalar
    # model in which Q and G are replaced by the means of their eigenvalues,
    # F ~ Z / (mean(q) mean(g) + c) with Z = -dJ/dF(0) / 2.
    J0, g0 = _objective_and_gradient(pieces, F, a, b, c)
    grad_rms = float(g0.square().mean().sqrt())
    if grad_rms == 0.0:
        logger.info("solve_gd: gradient at F = 0 is zero; update is zero")
        return torch.zeros(d_out, d_in, dtype=_F64, device=W.device)
    mean_q = (a * float(pieces.M_f.square().sum()) + b * d_out) / d_out
    mean_g = float(pieces.Kt.square().sum()) / r
    scale_F = 0.5 * grad_rms / (mean_q * mean_g + c)
    loss_scale = 1.0 / max(float(J0), torch.finfo(_F64).tiny)

    F = _adam_phase(pieces, F, a, b, c, steps, lr * scale_F, loss_scale, tolerance)
    start = _objective_and_gradient(pieces, F, a, b, c)
    logger.info("solve_gd: Adam phase done, J=%.12g (J at start %.12g)", float(start[0]), float(J0))
    F = _cg_phase(pieces, F, start, a, b, c, cg_steps, tolerance)
    final_value, _ = _objective_and_gradient(pieces, F, a, b, c)
    logger.info("solve_gd: finished, J=%.12g", float(final_value))
    return F @ U0.to(_F64).T
