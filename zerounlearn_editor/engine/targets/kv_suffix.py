"""The decoder layers after the edited one, run on cached inputs (both target evaluations use them).

The residual ``delta_i`` is added at one position (the lookup token) of one layer, so nothing before that
layer changes during the target optimisation. :class:`SuffixLayers` holds the layers after the edited one
(up to the loss layer) and runs them with the base model's own forward on the cached output of the edited
layer (``targets_optimizer: adam``). :class:`KVSuffix` (``adam_kv``) goes further: in every later layer the
positions before the lookup token do not see the delta (causal attention), so their keys and values are
computed once per chunk and each evaluation runs only the positions from the lookup token to the last one a
loss reads.
"""
from __future__ import annotations

import logging
import sys
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from zerounlearn_editor.support.model_access import get_module, module_device

LOG = logging.getLogger(__name__)

OPTIMIZERS = ("adam", "adam_kv")
"""Values of the ``targets_optimizer`` hparams key."""

_ROPE_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def _index_of(layers: List[nn.Module], module: nn.Module) -> int:
    return next(i for i, layer in enumerate(layers) if layer is module)


class SuffixLayers:
    """Decoder layers ``first .. stop - 1`` after the edited layer and the final norm (Llama-family or GPT-2).

    ``stop`` is one past ``loss_layer_module`` (empty: the model's last layer).
    """

    def __init__(self, model: nn.Module, layer_module: str, loss_layer_module: str, ln_f_module: str):
        self.kind = "gpt2" if getattr(model.config, "model_type", None) == "gpt2" else "rope"
        self.base = model.transformer if self.kind == "gpt2" else model.model
        layers = list(self.base.h if self.kind == "gpt2" else self.base.layers)
        first = _index_of(layers, get_module(model, layer_module)) + 1
        stop = len(layers)
        if loss_layer_module:
            stop = _index_of(layers, get_module(model, loss_layer_module)) + 1
        self.layers = layers[first:stop]
        self.norm = get_module(model, ln_f_module)

    @staticmethod
    def supported(model: nn.Module, layer_module: str, ln_f_module: str) -> bool:
        """Llama/Mistral/Qwen2/Qwen3 stacks whose ``inputs_embeds`` enter the first layer unchanged."""
        base = getattr(model, "model", None)
        if getattr(model.config, "model_type", None) not in _ROPE_TYPES or base is None:
            return False
        if not isinstance(getattr(base, "layers", None), nn.ModuleList) or getattr(base, "norm", None) is None:
            return False
        layer = get_module(model, layer_module)
        return any(layer is l for l in base.layers) and get_module(model, ln_f_module) is base.norm

    def run_stack(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states ``[rows, seq, d]`` from the edited layer's output ``hidden`` ``[rows, seq,
        d]``: the base model's own forward over the shortened layer list (exactly what the full model
        computes)."""
        full = self.base.layers
        self.base.layers = nn.ModuleList(self.layers)
        try:
            return self.base(inputs_embeds=hidden, attention_mask=attention_mask, use_cache=False).last_hidden_state
        finally:
            self.base.layers = full


class KVSuffix(SuffixLayers):
    """The layers after the edited one, run from each row's start position on with cached prefix keys/values.

    ``hidden`` ``[rows, seq, d]`` is the edited layer's output, ``attention_mask`` ``[rows, seq]`` (right or
    left padding), ``start`` ``[rows]`` the positions that get the delta, ``end`` ``[rows]`` one past the last
    position whose output is needed. The keys and values of positions ``< start`` (``[rows, kv_heads,
    max(start), hd]`` per layer) are computed once; :meth:`step` runs ``T = max(end - start)`` positions per
    row (position ids ``0..seq-1``).
    """

    def __init__(
        self,
        model: nn.Module,
        layer_module: str,
        loss_layer_module: str,
        ln_f_module: str,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        start: torch.Tensor,
        end: torch.Tensor,
    ):
        super().__init__(model, layer_module, loss_layer_module, ln_f_module)
        if self.kind == "rope":
            module = sys.modules[type(self.layers[0].self_attn).__module__] if self.layers else None
            self._rotary = getattr(module, "apply_rotary_pos_emb", None)
        device = hidden.device
        self.mask = attention_mask.to(device).bool()
        self.start, self.end = start.to(device), end.to(device)
        self.prefix = int(self.start.max()) if len(self.start) else 0
        self.hidden = hidden
        self.cache: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self._build_cache()

    @staticmethod
    def supported(model: nn.Module, layer_module: str, loss_layer_module: str, ln_f_module: str, seq: int) -> bool:
        """Llama/Mistral/Qwen2/Qwen3 (no sliding window shorter than ``seq``) and GPT-2 stacks."""
        model_type = getattr(model.config, "model_type", None)
        try:
            edited = get_module(model, layer_module)
            norm = get_module(model, ln_f_module)
        except Exception:  # noqa: BLE001 - an unknown layout is simply not supported
            return False
        if model_type == "gpt2":
            base = getattr(model, "transformer", None)
            if base is None or not isinstance(getattr(base, "h", None), nn.ModuleList) or norm is not base.ln_f:
                return False
            if getattr(model.config, "add_cross_attention", False) or getattr(
                model.config, "reorder_and_upcast_attn", False
            ):
                return False
            layers = list(base.h)
        elif SuffixLayers.supported(model, layer_module, ln_f_module):
            base = model.model
            if getattr(base, "rotary_emb", None) is None:
                return False
            layers = list(base.layers)
            for layer in layers:
                window = getattr(layer.self_attn, "sliding_window", None)
                if model_type == "mistral":
                    window = getattr(model.config, "sliding_window", None)
                if window is not None and int(window) < seq:
                    return False
            module = sys.modules.get(type(layers[0].self_attn).__module__)
            if getattr(module, "apply_rotary_pos_emb", None) is None:
                return False
        else:
            return False
        # the cached step reads each attention's own softmax scale (transformers >= 4.48 name it ``scaling``)
        attention = [l.attn if model_type == "gpt2" else l.self_attn for l in layers]
        if not all(isinstance(getattr(a, "scaling", None), (int, float)) for a in attention):
            return False
        return any(edited is l for l in layers)

    # ------------------------------------------------------------------ one layer

    def _qkv(self, layer: nn.Module, x: torch.Tensor, positions: torch.Tensor):
        """``q`` ``[rows, heads, T, hd]``, ``k``/``v`` ``[rows, kv_heads, T, hd]`` of ``x`` ``[rows, T, d]``."""
        if self.kind == "gpt2":
            attn = layer.attn
            q, k, v = attn.c_attn(layer.ln_1(x)).split(attn.split_size, dim=2)
            shape = (*x.shape[:-1], -1, attn.head_dim)
            return q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        shape = (*x.shape[:-1], -1, attn.head_dim)
        q, k = attn.q_proj(h).view(shape), attn.k_proj(h).view(shape)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = attn.v_proj(h).view(shape).transpose(1, 2)
        cos, sin = self.base.rotary_emb(x, positions)
        q, k = self._rotary(q, k, cos, sin)
        return q, k, v

    def _finish(self, layer: nn.Module, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, MLP block: ``attn_out`` ``[rows, heads, T, hd]``."""
        merged = attn_out.transpose(1, 2).reshape(*x.shape[:-1], -1)
        if self.kind == "gpt2":
            x = x + layer.attn.c_proj(merged)
            return x + layer.mlp(layer.ln_2(x))
        x = x + layer.self_attn.o_proj(merged)
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def _scale(self, layer: nn.Module) -> float:
        return float((layer.attn if self.kind == "gpt2" else layer.self_attn).scaling)

    @staticmethod
    def _attend(q, k, v, mask, scale):
        """Attention of ``q`` ``[b, heads, T, hd]`` over ``k``/``v`` ``[b, kv_heads, S, hd]``, ``mask`` ``[b,
        1, T, S]``; grouped-query heads are stacked along the query axis (``[b, kv_heads, rep * T, hd]``), no
        key copies."""
        heads, kv_heads = q.shape[1], k.shape[1]
        if heads == kv_heads:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        b, _, t, hd = q.shape
        rep = heads // kv_heads
        out = F.scaled_dot_product_attention(
            q.reshape(b, kv_heads, rep * t, hd), k, v, attn_mask=mask.repeat(1, 1, rep, 1), scale=scale
        )
        return out.reshape(b, heads, t, hd)

    def _build_cache(self) -> None:
        """Keys/values of the positions ``< prefix`` in every layer (causal: only those positions are run, the
        last layer only to its keys and values)."""
        rows = self.hidden.shape[0]
        seq = max(self.prefix, 1)
        pos = torch.arange(seq, device=self.hidden.device)
        causal = pos[None, :] <= pos[:, None]
        # a query always sees itself (a left-padded position would otherwise see nothing: NaN)
        mask = ((causal[None] & self.mask[:, None, :seq]) | torch.eye(seq, dtype=torch.bool, device=pos.device)[None])[
            :, None
        ]
        positions = pos[None].expand(rows, seq)
        x = self.hidden[:, :seq]
        with torch.no_grad():
            for index, layer in enumerate(self.layers):
                dev = module_device(layer, x.device)
                x, m, p = x.to(dev), mask.to(dev), positions.to(dev)
                q, k, v = self._qkv(layer, x, p)
                self.cache.append((k[:, :, : self.prefix].contiguous(), v[:, :, : self.prefix].contiguous()))
                if index < len(self.layers) - 1:
                    x = self._finish(layer, x, self._attend(q, k, v, m, self._scale(layer)))

    # ------------------------------------------------------------------ a step

    def step(
        self, rows: torch.Tensor, delta_rows: torch.Tensor, select: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
    ) -> torch.Tensor:
        """Final-norm hidden states ``[len(rows), T, d]`` at positions ``start[r] + t`` (``t < T``) with
        ``delta_rows`` ``[len(rows), d]`` added at ``start[r]``; outputs at ``t >= end[r] - start[r]`` are
        padding. ``select = (i, t)`` (two ``[m]`` index tensors) returns only those ``m`` states ``[m, d]``,
        the last layer's attention output, MLP and norm run at those positions only.
        """
        dev = self.hidden.device
        rows = rows.to(dev)
        start, end = self.start[rows], self.end[rows]
        width = int((end - start).max())
        t = torch.arange(width, device=dev)
        abs_pos = start[:, None] + t[None, :]  # [k, T]
        valid_pos = abs_pos < self.hidden.shape[1]
        safe = abs_pos.clamp_max(self.hidden.shape[1] - 1)
        x = self.hidden[rows[:, None], safe]  # [k, T, d]
        add = torch.zeros_like(x)
        add[:, 0] = delta_rows.to(device=dev, dtype=x.dtype)
        x = x + add
        token_ok = self.mask[rows[:, None], safe] & valid_pos  # [k, T]
        new_mask = (t[None, :] <= t[:, None])[None] & token_ok[:, None, :]
        new_mask = new_mask | torch.eye(width, dtype=torch.bool, device=dev)[None]
        j = torch.arange(self.prefix, device=dev)
        pre_mask = ((j[None, :] < start[:, None]) & self.mask[rows, : self.prefix])[:, None, :].expand(-1, width, -1)
        mask = torch.cat([pre_mask, new_mask], dim=2)[:, None]  # [k, 1, T, prefix + T]
        last = len(self.layers) - 1
        for index, (layer, (k_cache, v_cache)) in enumerate(zip(self.layers, self.cache)):
            ldev = module_device(layer, x.device)
            x = x.to(ldev)
            q, k, v = self._qkv(layer, x, abs_pos.to(ldev))
            r = rows.to(k_cache.device)
            k = torch.cat([k_cache[r].to(ldev), k], dim=2)
            v = torch.cat([v_cache[r].to(ldev), v], dim=2)
            if select is not None and index == last:
                # only the selected queries: [m, heads, 1, hd] against their own row's keys and values
                i, t_sel = select[0].to(ldev), select[1].to(ldev)
                if not len(i):
                    return x.new_zeros((0, x.shape[-1]))
                q_sel = q[i, :, t_sel][:, :, None]
                attn = self._attend(q_sel, k[i], v[i], mask.to(ldev)[i, :, t_sel][:, :, None], self._scale(layer))
                x = self._finish(layer, x[i, t_sel][:, None], attn)[:, 0]
                return self.norm(x.to(module_device(self.norm, x.device)))
            x = self._finish(layer, x, self._attend(q, k, v, mask.to(ldev), self._scale(layer)))
        out = self.norm(x.to(module_device(self.norm, x.device)))
        if select is not None:  # no layer after the edited one: select from its (normed) output
            return out[select[0].to(out.device), select[1].to(out.device)]
        return out


def note_kv_fallback(model: nn.Module, reason: str) -> None:
    """Log once per model that no cached evaluation covers it, and why (full forwards instead)."""
    if getattr(model, "_zerounlearn_kv_fallback_noted", False):
        return
    model.__dict__["_zerounlearn_kv_fallback_noted"] = True
    LOG.info(
        "targets: no KV-cached evaluation for %s (%s): %s; the same optimiser runs on full forward passes of the "
        "active rows (same result, slower)",
        getattr(model.config, "model_type", "?"), type(model).__name__, reason,
    )
