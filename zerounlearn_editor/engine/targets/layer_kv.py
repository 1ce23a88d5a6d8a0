"""The layers after the edited one, each called directly with a ``DynamicCache`` of the prefix (any decoder).

:class:`LayerKV` is the architecture-independent form of :class:`.kv_suffix.KVSuffix`: it runs the model's own
decoder layers and attention (no re-implementation per family). Per chunk the prefix positions of every row
(``< max(start)``) run once through the layers after the edited one, filling one cache per layer; each step
builds a ``DynamicCache`` from the active rows' cached keys/values and calls each layer on the positions
``start[r] .. end[r] - 1`` with

- its own 4D additive mask ``[k, 1, T, prefix + T]``: causal, padding, the row's own prefix only (the prefix
  positions at and after ``start[r]`` are recomputed with the delta), and the layer's sliding window if it has
  one (Gemma-2/3: sliding or full attention per layer index);
- its own position embeddings from the base model's ``rotary_emb`` (with the layer's type where the rotary module
  takes one) at the absolute positions ``start[r] + t``, and ``position_ids`` where the layer takes them.

A step's cache is built afresh from the stored prefix, so nothing written in a step outlives it. What the layers
receive is inferred from their signatures; :meth:`LayerKV.mismatch` compares a step at ``delta = 0`` with the full
forward on a few rows of each chunk (:func:`check_rows`: the extremes of prefix, span and padding), and the caller
falls back to full forwards (logged) when they differ: a model whose forward changes the
hidden states between layers, or passes its layers something this class does not build, is never run wrongly.
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from zerounlearn_editor.support.model_access import get_module, hidden_of, module_device

_CACHE_NAMES = ("cache", "past_key_values", "layer_past")
_KNOWN = frozenset({"hidden_states", "attention_mask", "position_ids", "position_embeddings", "use_cache", "alibi",
                    "output_attentions", "kwargs", *_CACHE_NAMES})
MISMATCH_RTOL = {torch.float32: 1e-3, torch.float64: 1e-6}
"""Largest relative difference (to the reference's largest magnitude) allowed at ``delta = 0``; other dtypes
(half precision): 5e-2."""


CHECK_ROWS = 4
"""At most this many rows per chunk are compared with the full forward at ``delta = 0`` (:func:`check_rows`)."""


def check_rows(start: torch.Tensor, end: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The rows ``[<= 4]`` (sorted, distinct) whose ``delta = 0`` step stands for the chunk's (``start``, ``end``
    ``[rows]``, ``mask`` ``[rows, seq]``): the longest cached prefix (largest ``start``), the shortest (smallest),
    the longest span recomputed (largest ``end - start``, where a sliding window reaches furthest) and the most
    padding (fewest real tokens). A layer call that differs from the full forward does so on every row of such a
    kind (masks, windows, positions and the cache are built the same way for each), so these catch it at a
    fraction of the full forward of every row."""
    if len(start) == 0:
        return torch.zeros(0, dtype=torch.long)
    start, end, real = start.cpu(), end.cpu(), mask.cpu().long().sum(1)
    picks = {int(start.argmax()), int(start.argmin()), int((end - start).argmax()), int(real.argmin())}
    return torch.tensor(sorted(picks)[:CHECK_ROWS], dtype=torch.long)


def _layer_list(model: nn.Module, layer_module: str) -> Tuple[Optional[nn.Module], Optional[nn.ModuleList]]:
    """The base module holding the decoder layers and their ``ModuleList`` (``model.model.layers`` ...)."""
    parent_name, _, _ = layer_module.rpartition(".")
    owner_name, _, list_name = parent_name.rpartition(".")
    try:
        layers = get_module(model, parent_name)
        base = get_module(model, owner_name) if owner_name else model
    except Exception:  # noqa: BLE001 - an unknown layout is simply not supported
        return None, None
    return (base, layers) if isinstance(layers, nn.ModuleList) else (None, None)


def _signature(layer: nn.Module) -> Dict[str, inspect.Parameter]:
    return dict(inspect.signature(layer.forward).parameters)


def _sliding_window(layer: nn.Module) -> Optional[int]:
    """The layer's attention window (an int ``sliding_window`` on a submodule), or ``None``."""
    for module in layer.modules():
        window = getattr(module, "sliding_window", None)
        if isinstance(window, int) and not isinstance(window, bool) and window > 0:
            return window
    return None


class LayerKV:
    """Decoder layers ``first .. stop - 1`` after ``layer_module`` (``stop``: one past ``loss_layer_module``, or
    every layer) and the final norm, run from each row's ``start`` on with the prefix in a ``DynamicCache``.

    ``hidden`` ``[rows, seq, d]`` is the edited layer's output, ``attention_mask`` ``[rows, seq]`` (right or left
    padding), ``start`` ``[rows]`` the positions that get the delta, ``end`` ``[rows]`` one past the last position
    whose output is needed; position ids are ``0 .. seq - 1`` (what the full forward uses).
    """

    def __init__(self, model: nn.Module, layer_module: str, loss_layer_module: str, ln_f_module: str,
                 hidden: torch.Tensor, attention_mask: torch.Tensor, start: torch.Tensor, end: torch.Tensor):
        self.model = model
        self.base, layer_list = _layer_list(model, layer_module)
        layers = list(layer_list)
        self.first = layers.index(get_module(model, layer_module)) + 1
        stop = len(layers)
        if loss_layer_module:
            stop = layers.index(get_module(model, loss_layer_module)) + 1
        self.layers = layers[self.first:stop]
        self.norm = get_module(model, ln_f_module)
        self.rotary = getattr(self.base, "rotary_emb", None)
        layer_types = getattr(model.config, "layer_types", None)
        rotary_typed = self.rotary is not None and "layer_type" in inspect.signature(self.rotary.forward).parameters
        self.layer_types = layer_types if rotary_typed else None  # the rotary module's argument, per layer index
        self.windows = [_sliding_window(layer) for layer in self.layers]
        self.signatures = [_signature(layer) for layer in self.layers]
        device = hidden.device
        self.mask = attention_mask.to(device).bool()
        self.start, self.end = start.to(device), end.to(device)
        self.prefix = int(self.start.max()) if len(self.start) else 0
        self.hidden = hidden
        self.cache: List[Tuple[torch.Tensor, torch.Tensor]] = []
        if self.layers and self.prefix:
            self._build_cache()

    @staticmethod
    def why_not(model: nn.Module, layer_module: str, loss_layer_module: str, ln_f_module: str) -> Optional[str]:
        """``None`` when the layers can be called this way, else the reason (one phrase)."""
        base, layer_list = _layer_list(model, layer_module)
        if layer_list is None:
            return f"{layer_module!r} is not an item of a layer list"
        try:
            edited = get_module(model, layer_module)
            if loss_layer_module and not any(get_module(model, loss_layer_module) is l for l in layer_list):
                return f"{loss_layer_module!r} is not in the layer list of {layer_module!r}"
            get_module(model, ln_f_module)
        except Exception as err:  # noqa: BLE001 - any layout problem means: not supported
            return f"module lookup failed ({err})"
        if not any(edited is l for l in layer_list):
            return f"{layer_module!r} is not in its layer list"
        implementation = getattr(model.config, "_attn_implementation", None)
        if implementation not in (None, "eager", "sdpa"):
            return f"attention implementation {implementation!r} takes no 4D mask"
        if getattr(model.config, "alibi", False):
            return "ALiBi biases are built by the model's forward"
        for layer in layer_list:
            params = _signature(layer)
            if not any(name in params for name in _CACHE_NAMES):
                return f"{type(layer).__name__} takes no cache"
            required = [n for n, p in params.items() if n not in _KNOWN and p.default is inspect.Parameter.empty
                        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            if required:
                return f"{type(layer).__name__} requires {required}"
        return None

    # ------------------------------------------------------------------ one layer call

    def _position_embeddings(self, index: int, x: torch.Tensor, positions: torch.Tensor, memo: Dict):
        """The rotary ``(cos, sin)`` of layer ``index`` at ``positions`` ``[k, T]``, computed once per layer type,
        device and dtype within one pass over the layers (``memo``; the rotary module reads only those of ``x``)."""
        layer_type = self.layer_types[self.first + index] if self.layer_types is not None else None
        key = (layer_type, x.device, x.dtype)
        if key not in memo:
            args = (x, positions) if layer_type is None else (x, positions, layer_type)
            memo[key] = self.rotary(*args)
        return memo[key]

    def _run(self, index: int, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache,
             memo: Dict) -> torch.Tensor:
        """Layer ``self.layers[index]`` on ``x`` ``[k, T, d]`` with the additive mask ``[k, 1, T, S]`` (``memo``: the
        pass's position embeddings, :meth:`_position_embeddings`)."""
        layer, params = self.layers[index], self.signatures[index]
        dev = module_device(layer, x.device)
        x, positions = x.to(dev), positions.to(dev)
        kwargs = {"attention_mask": mask.to(dev)}
        kwargs[next(name for name in _CACHE_NAMES if name in params)] = cache
        if "position_ids" in params:
            kwargs["position_ids"] = positions
        if "use_cache" in params:
            kwargs["use_cache"] = True
        if "alibi" in params:
            kwargs["alibi"] = None
        if "position_embeddings" in params and self.rotary is not None:
            kwargs["position_embeddings"] = self._position_embeddings(index, x, positions, memo)
        return hidden_of(layer(x, **kwargs))

    def _mask(self, index: int, q_pos: torch.Tensor, k_pos: torch.Tensor, allowed: torch.Tensor,
              dtype: torch.dtype) -> torch.Tensor:
        """Additive mask ``[k, 1, T, S]``: ``allowed`` ``[k, T, S]`` (where each query sees its own key, so no
        query row is empty) within the layer's window on ``q_pos`` ``[k, T]`` / ``k_pos`` ``[k, S]``."""
        window = self.windows[index]
        if window is not None:
            allowed = allowed & (q_pos[:, :, None] - k_pos[:, None, :] < window)
        out = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        return out.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]

    def _cache(self, rows: Optional[torch.Tensor]):
        """A fresh ``DynamicCache`` holding the prefix keys/values of ``rows`` (``None``: an empty one)."""
        from transformers import DynamicCache

        entries: List[Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]] = [(None, None)] * self.first
        if rows is None:
            return DynamicCache(ddp_cache_data=entries + [(None, None)] * len(self.layers))
        for k, v in self.cache:
            r = rows.to(k.device)
            entries.append((k[r], v[r]))
        return DynamicCache(ddp_cache_data=entries)

    def _build_cache(self) -> None:
        """Keys/values of positions ``< prefix`` in every suffix layer (the last layer runs only to fill them)."""
        rows, seq = self.hidden.shape[0], self.prefix
        pos = torch.arange(seq, device=self.hidden.device)
        positions = pos[None].expand(rows, seq)
        allowed = ((pos[None, :] <= pos[:, None])[None] & self.mask[:, None, :seq]) | torch.eye(
            seq, dtype=torch.bool, device=pos.device)[None]
        cache, memo = self._cache(None), {}
        x = self.hidden[:, :seq]
        with torch.no_grad():
            for index in range(len(self.layers)):
                mask = self._mask(index, positions, positions, allowed, x.dtype)
                x = self._run(index, x, mask, positions, cache, memo)
        for index in range(len(self.layers)):
            layer_cache = cache.layers[self.first + index]
            self.cache.append((layer_cache.keys.detach(), layer_cache.values.detach()))

    # ------------------------------------------------------------------ a step

    def step(self, rows: torch.Tensor, delta_rows: torch.Tensor,
             select: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """Final-norm hidden states ``[len(rows), T, d]`` at positions ``start[r] + t`` (``t < T = max(end -
        start)``) with ``delta_rows`` ``[len(rows), d]`` added at ``start[r]``; outputs at ``t >= end[r] -
        start[r]`` are padding. ``select = (i, t)`` (two ``[m]`` index tensors) returns only those states ``[m,
        d]``."""
        dev = self.hidden.device
        rows = rows.to(dev)
        start, end = self.start[rows], self.end[rows]
        width = int((end - start).max())
        t = torch.arange(width, device=dev)
        abs_pos = start[:, None] + t[None, :]  # [k, T]
        safe = abs_pos.clamp_max(self.hidden.shape[1] - 1)
        x = self.hidden[rows[:, None], safe]
        add = torch.zeros_like(x)
        add[:, 0] = delta_rows.to(device=dev, dtype=x.dtype)
        x = x + add
        token_ok = self.mask[rows[:, None], safe] & (abs_pos < self.hidden.shape[1])  # [k, T]
        new_ok = ((t[None, :] <= t[:, None])[None] & token_ok[:, None, :]) | torch.eye(
            width, dtype=torch.bool, device=dev)[None]
        j = torch.arange(self.prefix, device=dev)
        pre_ok = ((j[None, :] < start[:, None]) & self.mask[rows, : self.prefix])[:, None, :].expand(-1, width, -1)
        allowed = torch.cat([pre_ok, new_ok], dim=2)  # [k, T, prefix + T]
        k_pos = torch.cat([j[None].expand(len(rows), -1), abs_pos], dim=1)
        cache, memo = (self._cache(rows) if self.prefix else self._cache(None)), {}
        for index in range(len(self.layers)):
            x = self._run(index, x, self._mask(index, abs_pos, k_pos, allowed, x.dtype), abs_pos, cache, memo)
        out = self.norm(x.to(module_device(self.norm, x.device)))
        if select is not None:
            return out[select[0].to(out.device), select[1].to(out.device)]
        return out

    def check_rows(self) -> torch.Tensor:
        """The rows :meth:`mismatch` compares (sorted, at most :data:`CHECK_ROWS`): :func:`check_rows` of this
        chunk."""
        return check_rows(self.start, self.end, self.mask)

    def mismatch(self, reference: torch.Tensor, rows: Optional[torch.Tensor] = None) -> Optional[str]:
        """``None`` when a step of ``rows`` (default: every row) at ``delta = 0`` equals ``reference`` ``[len(rows),
        seq, d]`` (the full forward's final-norm states of those rows) at every real position ``start[r] .. end[r] -
        1``, else what differs."""
        if rows is None:
            rows = torch.arange(self.hidden.shape[0])
        rows = rows.to(self.hidden.device)
        with torch.no_grad():
            fast = self.step(rows, torch.zeros(len(rows), self.hidden.shape[-1], device=self.hidden.device))
        start, end, mask = self.start[rows], self.end[rows], self.mask[rows]
        t = torch.arange(fast.shape[1], device=start.device)
        pos = start[:, None] + t[None, :]
        keep = (pos < end[:, None]) & mask.gather(1, pos.clamp_max(mask.shape[1] - 1))
        i, tt = torch.nonzero(keep, as_tuple=True)
        ref = reference[i.to(reference.device), pos[i, tt].to(reference.device)].float()
        got = fast[i.to(fast.device), tt.to(fast.device)].float().to(ref.device)
        scale = float(ref.abs().max()) if ref.numel() else 0.0
        error = float((got - ref).abs().max()) if ref.numel() else 0.0
        rtol = MISMATCH_RTOL.get(self.hidden.dtype, 5e-2)
        if error <= rtol * max(scale, 1e-6):
            return None
        return (f"the cached layers differ from the full forward at delta = 0 (max |diff| {error:.3g}, "
                f"scale {scale:.3g})")
