"""``experimental.layer_split``: how the residual gap ``z - h`` is split over the edited layers.

The paper gives the layer at position ``p`` of ``L`` edited layers the share ``1 / (L - p)`` of the gap left when it
is reached (the even split). ``capacity`` gives it ``c_p / sum_{q >= p} c_q`` instead, ``c`` a capacity per layer
measured on the unedited model before the first write: the mean share of the forget keys' norm inside the null space
of the layer's ``C0`` (:func:`null_key_fraction`) times the post-MLP map's mean gain (:func:`post_mlp_gain`, the
residual change per unit of down_proj output change; 1 where the value is added as is). Were the gap unchanged by the
earlier layers' writes, layer ``p`` would write ``c_p / sum c`` of it (:func:`gap_portions`).
"""
from __future__ import annotations

import math

import torch

from zerounlearn_editor.engine.post_mlp import PostMlpMap, apply_post_mlp

LAYER_SPLIT_KEY = "layer_split"
LAYER_SPLITS = ("capacity",)
"""The values ``experimental.layer_split`` accepts (absent: the paper's even split)."""

_JACOBIAN_COLUMNS = 16  # values whose post-MLP Jacobian is formed at once (d x d float64 each)


def remaining_gap_shares(capacities: torch.Tensor) -> torch.Tensor:
    """``s`` ``[L]`` for capacities ``c`` ``[L]`` (finite, >= 0, in edit order): ``s_p = c_p / sum_{q >= p} c_q``,
    the share of the gap left at position ``p`` that layer ``p`` is asked to write; the last share is 1. Where every
    remaining layer has capacity 0 the rest is split evenly (``1 / (L - p)``)."""
    c = capacities.double()
    if c.dim() != 1 or c.numel() == 0 or not torch.isfinite(c).all() or (c < 0).any():
        raise ValueError(f"capacities must be a non-empty 1-d tensor of finite values >= 0, got {capacities}")
    left = c.flip(0).cumsum(0).flip(0)  # sum_{q >= p} c_q
    even = 1.0 / torch.arange(c.numel(), 0, -1, dtype=torch.float64)
    shares = torch.where(left > 0, c / left.clamp_min(torch.finfo(torch.float64).tiny), even)
    shares[-1] = 1.0
    return shares


def gap_portions(shares: torch.Tensor) -> torch.Tensor:
    """``w`` ``[L]``: the portion of the first gap each layer writes when every earlier layer wrote its share
    exactly, ``w_p = s_p prod_{q < p} (1 - s_q)`` for shares ``s`` ``[L]`` of the remaining gap (sums to 1 when the
    last share is 1)."""
    s = shares.double()
    before = torch.cat([torch.ones(1, dtype=s.dtype), torch.cumprod(1 - s, 0)[:-1]])
    return s * before


def null_key_fraction(C0: torch.Tensor, K_f: torch.Tensor, threshold: float) -> float:
    """Mean over the keys ``K_f`` ``[d_in, n]`` of ``|U0^T k| / |k|``, ``U0`` the eigenvectors of the symmetrised
    ``C0`` ``[d_in, d_in]`` with eigenvalue strictly below ``threshold`` (float64; a zero key counts 0)."""
    C = C0.double()
    eigenvalues, vectors = torch.linalg.eigh(0.5 * (C + C.t()))
    U0 = vectors[:, eigenvalues < threshold]
    K = K_f.double()
    norms = K.norm(dim=0)
    inside = (U0.t() @ K).norm(dim=0)
    return float(torch.where(norms > 0, inside / norms.clamp_min(1e-300), torch.zeros_like(norms)).mean())


def post_mlp_gain(spec: PostMlpMap, values: torch.Tensor) -> float:
    """Mean over the values ``values`` ``[d, n]`` of ``|J_f(v)|_F / sqrt(d)``, ``J_f`` the Jacobian of the post-MLP
    map ``f`` at ``v`` (the root-mean-square residual change per unit of value change); ``|scale|`` for a map
    without a norm."""
    if spec.kind == "identity":
        return abs(spec.scale)
    v = values.double()
    d = v.shape[0]

    def one(column: torch.Tensor) -> torch.Tensor:
        return apply_post_mlp(spec, column[:, None])[:, 0]

    jacobian = torch.func.vmap(torch.func.jacfwd(one))
    gains = [jacobian(chunk.t()).flatten(1).norm(dim=1) for chunk in v.split(_JACOBIAN_COLUMNS, dim=1)]
    return float(torch.cat(gains).mean()) / math.sqrt(d)


def layer_capacity(C0: torch.Tensor, K_f: torch.Tensor, threshold: float, spec: PostMlpMap,
                   values: torch.Tensor) -> float:
    """One layer's capacity: :func:`null_key_fraction` of its forget keys ``K_f`` ``[d_in, n]`` times
    :func:`post_mlp_gain` at their values ``values`` ``[d_out, n]`` (``W K_f`` plus the bias)."""
    return null_key_fraction(C0, K_f, threshold) * post_mlp_gain(spec, values)
