"""How the edited MLP output reaches the residual stream, and the value change a residual change needs.

The edit writes ``W' k = M_n`` for a wanted residual change ``delta`` at the lookup token. Most blocks add
the MLP output ``v = W k (+ b)`` to the residual as it is (the value changes by ``delta``); Gemma-2/3 and
OLMo-2 pass it through an RMSNorm first (``post_feedforward_layernorm``), Granite scales it
(``residual_multiplier``). :class:`PostMlpMap` is that map ``f = scale * norm``; :func:`value_change` gives
``dv`` with ``f(v + dv) - f(v) = delta`` where possible (a norm's output has a fixed size, so ``dv`` keeps the
current value's norm). :func:`detect_post_mlp_maps` finds each edited layer's map with one short perturbed
forward pass; a block whose MLP output reaches the residual some other way is refused, naming the layer.
"""
from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.engine.architectures import is_norm
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.support.model_access import (
    StopForward,
    capture_outputs,
    get_module,
    hidden_of,
    probe_ids,
    unflatten_tokens,
)

LOG = logging.getLogger(__name__)

_REL_TOL = 1e-3  # a candidate map must reproduce the layer's output change to this relative error (float32/64)
_REL_TOL_HALF = 0.1  # 16-bit residual streams round the output change; the candidates still differ by O(1)


class UnsupportedResidualPath(ValueError):
    """The edited module's output reaches the residual stream through a map this package cannot invert."""


@dataclass(frozen=True)
class PostMlpMap:
    """``f(v) = scale * norm(v)``: how a value ``v`` ``[d]`` enters the residual. ``kind``: ``"identity"``,
    ``"rms"`` (``gain * v / sqrt(mean(v^2) + eps)``) or ``"layer_norm"`` (``gain * (v - mean) / sqrt(var +
    eps) + bias``); ``gain`` / ``bias`` ``[d]`` (float64, CPU); ``module`` names the norm."""

    kind: str = "identity"
    scale: float = 1.0
    gain: Optional[torch.Tensor] = None
    bias: Optional[torch.Tensor] = None
    eps: float = 0.0
    module: str = ""

    @property
    def is_identity(self) -> bool:
        """True when the value is added to the residual unchanged (the paper's assumption)."""
        return self.kind == "identity" and self.scale == 1.0

    def describe(self) -> str:
        if self.is_identity:
            return "added as is"
        norm = f"{self.kind} norm {self.module}" if self.kind != "identity" else ""
        scale = f"x {self.scale:.4g}" if self.scale != 1.0 else ""
        return " then ".join(p for p in (norm, scale) if p)


IDENTITY = PostMlpMap()


def _normalise(kind: str, v: torch.Tensor, eps: float) -> torch.Tensor:
    """``v`` ``[d, n]`` normalised per column (RMS, or centred then divided by the std)."""
    if kind == "layer_norm":
        v = v - v.mean(0, keepdim=True)
    return v / torch.sqrt(v.pow(2).mean(0, keepdim=True) + eps)


def apply_post_mlp(spec: PostMlpMap, v: torch.Tensor) -> torch.Tensor:
    """``f(v)`` ``[d, n]`` for values ``v`` ``[d, n]`` (one per column), in ``v``'s dtype."""
    if spec.kind == "identity":
        return spec.scale * v
    gain = spec.gain.to(v)[:, None]
    out = gain * _normalise(spec.kind, v, spec.eps)
    if spec.bias is not None:
        out = out + spec.bias.to(v)[:, None]
    return spec.scale * out


_PREIMAGE_STEPS = 200  # bisection steps of the RMS preimage's multiplier (float64 converges in about 60)


def rms_preimage(gain: torch.Tensor, wanted: torch.Tensor, current: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """``u`` ``[d, n]`` with ``|u|^2 = d`` (RMS 1) whose image ``gain * u`` is the point of the RMS norm's image
    closest to ``wanted`` ``[d, n]``; coordinates where ``live`` ``[d, 1]`` is false keep ``current``'s value.

    The minimiser of ``|g u - t|^2`` on the sphere is ``u = g t / (g^2 + lam)`` with the multiplier ``lam >
    -min g^2`` where ``|u|^2 = d`` (``|u|`` falls as ``lam`` grows; found by bisection). A ``wanted`` on the image
    gives ``lam = 0``, the exact preimage ``t / g``."""
    d = gain.shape[0]
    g = torch.where(live, gain, torch.zeros_like(gain))
    fixed = torch.where(live, torch.zeros_like(current), current)
    budget = (d - fixed.pow(2).sum(0, keepdim=True)).clamp_min(1e-12)
    g2, gt = g.pow(2), g * wanted
    lo = torch.full_like(budget, -float(torch.where(live, g2, torch.full_like(g2, math.inf)).min()))
    hi = gt.norm(dim=0, keepdim=True) / budget.sqrt() + 1.0
    for _ in range(_PREIMAGE_STEPS):
        mid = (lo + hi) / 2
        long = (gt / (g2 + mid)).where(live, torch.zeros_like(gt)).pow(2).sum(0, keepdim=True) > budget
        lo, hi = torch.where(long, mid, lo), torch.where(long, hi, mid)
    u = (gt / (g2 + hi)).where(live, torch.zeros_like(gt))
    return fixed + u


def value_change(spec: PostMlpMap, v: torch.Tensor, delta: torch.Tensor, gain_tol: float = 1e-6) -> torch.Tensor:
    """The change ``dv`` ``[d, n]`` of values ``v`` ``[d, n]`` that moves ``f(v)`` by ``delta`` ``[d, n]``.

    Identity / scale: ``dv = delta / scale``. RMS norm: the value whose output is the point of the norm's image
    closest to ``t = f(v) + delta`` (:func:`rms_preimage`), at the norm of ``v``. LayerNorm: ``t`` mapped back through
    the gain and bias to a normalised ``u``, scaled to the norm of ``v``'s centred part, keeping its mean. Both are
    exact when ``t`` lies on the norm's image. Coordinates whose gain is below ``gain_tol`` times the largest keep
    their value.
    """
    if v.shape != delta.shape or v.dim() != 2:
        raise ValueError(f"v and delta must both be [d, n], got {tuple(v.shape)} and {tuple(delta.shape)}")
    if spec.scale == 0:
        raise ValueError("a post-MLP scale of 0 passes nothing to the residual")
    if spec.kind == "identity":
        return delta / spec.scale
    gain = spec.gain.to(v)[:, None]
    live = gain.abs() > gain_tol * gain.abs().max()
    current = _normalise(spec.kind, v, spec.eps)
    wanted = apply_post_mlp(spec, v) + delta
    unscaled = wanted / spec.scale
    if spec.bias is not None:
        unscaled = unscaled - spec.bias.to(v)[:, None]
    if spec.kind == "layer_norm":
        u = torch.where(live, unscaled / torch.where(live, gain, torch.ones_like(gain)), current)
        mean = v.mean(0, keepdim=True)
        centred, u = v - mean, u - u.mean(0, keepdim=True)
        new = mean + u * (centred.norm(dim=0, keepdim=True) / u.norm(dim=0, keepdim=True).clamp_min(1e-30))
    else:
        u = rms_preimage(gain, unscaled, current, live)
        new = u * (v.norm(dim=0, keepdim=True) / u.norm(dim=0, keepdim=True).clamp_min(1e-30))
    dv = new - v
    return torch.where(delta.abs().amax(0, keepdim=True) == 0, torch.zeros_like(dv), dv)


def value_targets(W: torch.Tensor, K_f: torch.Tensor, delta: torch.Tensor, spec: PostMlpMap = IDENTITY,
                  bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``M_n`` ``[d_out, n]``: the values whose residual contribution differs from the current one by ``delta``.

    ``W`` ``[d_out, d_in]``, ``K_f`` ``[d_in, n]``, ``delta`` ``[d_out, n]``, ``bias`` ``[d_out]`` the edited
    module's bias (the norm sees ``W k + b``). The identity map gives the paper's ``W K_f + delta``.
    """
    if spec.is_identity:
        return W @ K_f + delta
    current = W @ K_f
    v = current if bias is None else current + bias.to(current)[:, None]
    return current + value_change(spec, v, delta)


def _norm_eps(module: nn.Module) -> float:
    for attr in ("eps", "variance_epsilon", "epsilon", "layer_norm_eps"):
        value = getattr(module, attr, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return 1e-6


def _fit_norm(module: nn.Module, name: str, x: torch.Tensor, tol: float = _REL_TOL) -> Optional[PostMlpMap]:
    """RMS or LayerNorm form of ``module`` fitted on inputs ``x`` ``[m, d]`` (rows), or None if neither fits."""
    eps = _norm_eps(module)
    with torch.no_grad():
        y = module(x).double()
    xd = x.double().t()  # [d, m]
    for kind in ("rms", "layer_norm"):
        r = _normalise(kind, xd, eps)  # [d, m]
        if kind == "rms":
            gain = (y.t() * r).sum(1) / r.pow(2).sum(1).clamp_min(1e-30)
            bias = None
            fitted = gain[:, None] * r
        else:  # least squares per coordinate: y = gain * r + bias
            r_mean, y_mean = r.mean(1, keepdim=True), y.t().mean(1, keepdim=True)
            gain = ((r - r_mean) * (y.t() - y_mean)).sum(1) / (r - r_mean).pow(2).sum(1).clamp_min(1e-30)
            bias = (y_mean[:, 0] - gain * r_mean[:, 0])
            fitted = gain[:, None] * r + bias[:, None]
        if (fitted - y.t()).norm() <= tol * y.norm():
            return PostMlpMap(
                kind=kind, gain=gain.cpu(), bias=None if bias is None else bias.cpu(), eps=eps, module=name
            )
    return None


@torch.no_grad()
def detect_post_mlp_maps(model: nn.Module, layer_module_tmp: str, rewrite_module_tmp: str,
                         layers: Sequence[int]) -> Dict[int, PostMlpMap]:
    """The :class:`PostMlpMap` of each layer in ``layers`` (one forward pass of ``1 + len(layers)`` rows).

    Row ``1 + i`` adds a seeded random perturbation ``e`` to the output ``m`` of layer ``layers[i]``'s edited
    module; the layer's output change on that row, ``f(m + e) - f(m)``, must be reproduced by a candidate map
    (else :class:`UnsupportedResidualPath` names the layer).
    """
    layers = list(layers)
    ids = probe_ids(model, 1 + len(layers))
    rewrites = {l: rewrite_module_tmp.format(l) for l in layers}
    blocks = {l: layer_module_tmp.format(l) for l in layers}
    generator = torch.Generator().manual_seed(0)
    clean: Dict[int, torch.Tensor] = {}
    noise: Dict[int, torch.Tensor] = {}
    residual: Dict[int, float] = {}  # the RMS of each block's input (the residual stream the change is added to)

    def read_residual(layer: int):
        def hook(_m, args, kwargs):
            hidden = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")
            if isinstance(hidden, torch.Tensor):
                residual[layer] = float(hidden.detach().float().pow(2).mean().sqrt())
        return hook

    def perturb(row: int, layer: int):
        def hook(_m, _a, output):
            flat = hidden_of(output)
            value = unflatten_tokens(flat, tuple(ids.shape))  # OPT flattens the tokens before its MLP
            clean[layer] = value[0].detach().clone()
            if layer not in noise:
                # at least the residual's size: a 16-bit stream rounds the sum residual + value to its own
                # precision, which would drown a perturbation of the (often much smaller) MLP output's size
                scale = max(float(value[0].float().std()), residual.get(layer, 0.0)) or 1.0
                noise[layer] = (torch.randn(value.shape[1:], generator=generator, dtype=torch.float32) * scale).to(
                    value
                )
            value = value.clone()
            value[row] = value[row] + noise[layer]
            value = value.view(flat.shape)
            return value if not isinstance(output, tuple) else (value, *output[1:])
        return hook

    handles = [get_module(model, rewrites[l]).register_forward_hook(perturb(1 + i, l))
               for i, l in enumerate(layers)]
    handles += [get_module(model, blocks[l]).register_forward_pre_hook(read_residual(l), with_kwargs=True)
                for l in layers]
    names = list(blocks.values())
    try:
        with eval_mode(model), capture_outputs(model, names, stop_after=names[-1]) as outputs, \
                contextlib.suppress(StopForward):
            model(input_ids=ids)
    finally:
        for handle in handles:
            handle.remove()
    result: Dict[int, PostMlpMap] = {}
    for i, layer in enumerate(layers):
        change = (outputs[blocks[layer]][1 + i] - outputs[blocks[layer]][0]).double()  # [seq, d]
        result[layer] = _match(model, blocks[layer], rewrites[layer], clean[layer], noise[layer], change)
        if not result[layer].is_identity:
            LOG.info("layer %d: the output of %s reaches the residual %s; targets map through it",
                     layer, rewrites[layer], result[layer].describe())
    return result


def _fit_scale(change: torch.Tensor, image: torch.Tensor, tol: float) -> Optional[float]:
    denominator = float((image * image).sum())
    if denominator == 0:
        return None
    scale = float((change * image).sum()) / denominator
    if scale != 0 and float((change - scale * image).norm()) <= tol * float(change.norm()):
        return scale
    return None


def _match(model, block: str, rewrite: str, m_raw: torch.Tensor, e_raw: torch.Tensor,
           change: torch.Tensor) -> PostMlpMap:
    """The map taking the edited module's output ``m_raw`` ``[seq, d]`` perturbed by ``e_raw`` to the layer's
    output change ``change``: a scale, or one of the block's norms then a scale."""
    m, e = m_raw.double(), e_raw.double()
    tol = _REL_TOL if m_raw.dtype in (torch.float32, torch.float64) else _REL_TOL_HALF
    if m.shape != change.shape:
        raise UnsupportedResidualPath(
            f"{block}: the output of {rewrite} has {m.shape[-1]} features per token, the residual stream "
            f"{change.shape[-1]}: it is not what the MLP adds to the residual (name the MLP's output projection)")
    scale = _fit_scale(change, e, tol)
    if scale is not None:  # within the residual's rounding of 1: added as is (half precision rounds the fit)
        return PostMlpMap(scale=1.0 if abs(scale - 1.0) <= tol else scale)
    tried: List[str] = []
    for sub, norm in get_module(model, block).named_modules():  # the block's norms of width d_model
        name = f"{block}.{sub}"
        if not sub or not is_norm(norm, m_raw.shape[-1]) or name.startswith(rewrite):
            continue
        tried.append(name)
        image = (norm(m_raw + e_raw).double() - norm(m_raw).double())
        scale = _fit_scale(change, image, tol)
        if scale is None:
            continue
        fitted = _fit_norm(norm, name, torch.cat([m_raw, m_raw + e_raw]), tol)
        if fitted is None:
            raise UnsupportedResidualPath(
                f"{block}: the output of {rewrite} reaches the residual through {name} ({type(norm).__name__}), "
                "which is neither an RMSNorm nor a LayerNorm; editing it is not supported")
        return replace(fitted, scale=1.0 if abs(scale - 1.0) <= tol else scale)
    raise UnsupportedResidualPath(
        f"{block}: the output of {rewrite} does not reach the residual stream as is, scaled, or through one of the "
        f"block's norms ({tried or 'none'}); editing it is not supported (is rewrite_module_tmp the MLP's output "
        "projection?)"
    )
