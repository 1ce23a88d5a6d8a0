"""Cheaper neutral-target optimisation (``targets_optimizer: adam_kv``, the default).

The residual ``delta_i`` is added at one position (the lookup token) of one layer. In every
later layer the positions before the lookup token do not see it (causal attention), so their
keys and values never change during the optimisation. :class:`KVSuffix` computes them once per
chunk and each evaluation runs the layers after the edited one only on the positions from the
lookup token to the last position a loss reads (the NLL of the target tokens, which follow the
prompt, and the KL at the lookup token of the ``"{subject} is a"`` row). Rows of requests that
stopped are left out of the batch, so frozen requests cost nothing.

On these evaluations ``adam_kv`` runs the paper's Adam loop (same updates, clamp and early stop
as ``adam``), equal to it up to float rounding.

Loss per request (as :mod:`zerounlearn_editor.engine.targets`): weighted target NLL over the rewriting
rows (``objective: suppress_answer``: the mean of ``-log(1 - p(answer))`` over them instead) + ``kl_factor``
KL(initial || now) at the KL row + ``weight_decay |delta|^2 / |h0|^2``. The early stop reads the first term.
"""
from __future__ import annotations

import contextlib
import logging
import sys
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from zerounlearn_editor.engine.adam import adam_targets
from zerounlearn_editor.engine.target_rows import encode_target_rows, suppression_per_request
from zerounlearn_editor.engine.model_access import (
    StopForward,
    capture_outputs,
    get_module,
    hidden_of,
    logits_transform,
    model_device,
    module_device,
)
from zerounlearn_editor.engine.requests import ForgetRequest

__all__ = ["KVSuffix", "optimise_chunk_fast", "OPTIMIZERS"]

LOG = logging.getLogger(__name__)

OPTIMIZERS = ("adam", "adam_kv")
"""Values of the ``targets_optimizer`` hparams key (``adam``: the paper's loop, in targets.py)."""

_ROPE_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


class KVSuffix:
    """The decoder layers after the edited one, run from each row's start position on.

    ``hidden`` ``[rows, seq, d]`` is the edited layer's output (no delta), ``attention_mask``
    ``[rows, seq]`` (1 = token; right or left padding), ``start`` ``[rows]`` the positions that get
    the delta, ``end`` ``[rows]`` one past the last position whose output is needed. The keys and
    values of positions ``< start`` are computed once here (``[rows, kv_heads, max(start), hd]``
    per layer); :meth:`step` then runs ``T = max(end - start)`` positions per row. Position ids are
    the absolute indices ``0..seq-1`` (what the models use by default).
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
        self.kind = "gpt2" if getattr(model.config, "model_type", None) == "gpt2" else "rope"
        self.base = model.transformer if self.kind == "gpt2" else model.model
        layers = list(self.base.h if self.kind == "gpt2" else self.base.layers)
        edited = get_module(model, layer_module)
        first = next(i for i, l in enumerate(layers) if l is edited) + 1
        stop = len(layers)
        if loss_layer_module:
            loss_layer = get_module(model, loss_layer_module)
            stop = next(i for i, l in enumerate(layers) if l is loss_layer) + 1
        self.layers = layers[first:stop]
        self.norm = get_module(model, ln_f_module)
        self.layer_indices = list(range(first, stop))
        if self.kind == "rope":
            module = sys.modules[type(self.layers[0].self_attn).__module__] if self.layers else None
            self._rotary = getattr(module, "apply_rotary_pos_emb", None)
        device = hidden.device
        self.mask = attention_mask.to(device).bool()
        self.start, self.end = start.to(device), end.to(device)
        self.prefix = int(self.start.max()) if len(self.start) else 0
        self.width = int((self.end - self.start).max()) if len(self.start) else 1
        self.hidden = hidden
        self.cache: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self._build_cache()

    # ------------------------------------------------------------------ support

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
            if getattr(model.config, "add_cross_attention", False) or getattr(model.config, "reorder_and_upcast_attn", False):
                return False
            layers = list(base.h)
        elif model_type in _ROPE_TYPES:
            base = getattr(model, "model", None)
            if base is None or not isinstance(getattr(base, "layers", None), nn.ModuleList):
                return False
            if norm is not getattr(base, "norm", None) or getattr(base, "rotary_emb", None) is None:
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
        # the cached step reads each attention's own softmax scale (transformers >= 4.48 name it ``scaling``);
        # without it the optimiser runs on full forwards of the active rows (the same result)
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
        """Attention of ``q`` ``[b, heads, T, hd]`` over ``k``/``v`` ``[b, kv_heads, S, hd]``, ``mask`` ``[b, 1, T, S]``.

        Grouped-query attention (``heads = rep * kv_heads``, query head ``h`` reads key/value head ``h // rep``)
        without copying the keys and values ``rep`` times: each key/value head attends for its ``rep`` query
        heads stacked along the query axis (``[b, kv_heads, rep * T, hd]``), with the mask repeated to match.
        """
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
        """Keys/values of the positions ``< prefix`` in every layer. Attention is causal, so those positions
        depend on nothing after them: only the first ``prefix`` positions are run (at least one, for the
        shapes), and the last layer only to its keys and values."""
        rows = self.hidden.shape[0]
        seq = max(self.prefix, 1)
        pos = torch.arange(seq, device=self.hidden.device)
        causal = pos[None, :] <= pos[:, None]
        # a query always sees itself (a left-padded position would otherwise see nothing: NaN)
        mask = ((causal[None] & self.mask[:, None, :seq]) | torch.eye(seq, dtype=torch.bool, device=pos.device)[None])[:, None]
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
        """Final-norm hidden states ``[len(rows), T, d]`` at positions ``start[r] + t`` (``t < T``).

        ``delta_rows`` ``[len(rows), d]`` is added at ``start[r]`` (t = 0) of each row. ``T`` is
        ``max(end - start)`` over ``rows``; outputs at ``t >= end[r] - start[r]`` are padding.

        ``select = (i, t)`` (two ``[m]`` index tensors: a row of ``rows`` and a position ``t``) returns only
        those ``m`` states, ``[m, d]``: the last layer then runs its attention output, MLP and the final norm
        at those positions only (the other positions' keys and values are all it needs from them).
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


def _note_fallback(model: nn.Module) -> None:
    """Log once per model that the cached evaluation does not cover its architecture (full forwards instead)."""
    if getattr(model, "_zerounlearn_kv_fallback_noted", False):
        return
    model.__dict__["_zerounlearn_kv_fallback_noted"] = True
    LOG.info(
        "targets: the KV-cached evaluation covers Llama/Mistral/Qwen2/Qwen3 and GPT-2 blocks, not %s (%s); the same "
        "optimiser runs on full forward passes of the active rows (same result, slower)",
        getattr(model.config, "model_type", "?"), type(model).__name__,
    )


# ---------------------------------------------------------------------- the chunk's rows and losses


class _Problem:
    """The rows of one chunk and the loss of any subset of its requests at given residuals."""

    def __init__(self, model, tok, requests: Sequence[ForgetRequest], target_ids, prefixes, cfg):
        self.model, self.cfg = model, cfg
        device = model_device(model)
        self.head = get_module(model, cfg.lm_head_module)
        self.head_device = self.head.weight.device
        self.logits_transform = logits_transform(model)
        n, n_ctx = len(requests), len(prefixes)
        self.n, self.n_ctx = n, n_ctx
        rows_ = encode_target_rows(tok, requests, target_ids, prefixes, cfg.fact_token, device)
        batch, rw_req = rows_.batch, rows_.rw_req
        t_rows, t_pos, t_tok, t_weight, t_req = rows_.t_rows, rows_.t_pos, rows_.t_tok, rows_.t_weight, rows_.t_req
        self.batch = batch
        n_rw = len(rw_req)
        self.n_rw = n_rw
        lookup = batch.lookup.cpu()
        self.row_req = torch.tensor(rw_req + list(range(n)))
        end = lookup + 1
        for row, pos in zip(t_rows, t_pos):
            end[row] = max(int(end[row]), pos + 1)
        self.start, self.end = lookup, end
        self.t_rows, self.t_pos = torch.tensor(t_rows, dtype=torch.long), torch.tensor(t_pos, dtype=torch.long)
        self.t_tok, self.t_weight = torch.tensor(t_tok, dtype=torch.long), torch.tensor(t_weight)
        self.t_req = torch.tensor(t_req, dtype=torch.long)
        self.kl_rows = torch.arange(n_rw, n_rw + n)
        self.bare_rows = torch.arange(0, n_rw, n_ctx)
        # rows of each request: its n_ctx rewriting rows, then its KL row
        self.req_rows = [list(range(i * n_ctx, (i + 1) * n_ctx)) + [n_rw + i] for i in range(n)]

        layer = get_module(model, cfg.layer_module)
        self.layer_device = module_device(layer, device)
        with torch.no_grad(), capture_outputs(model, [cfg.layer_module], stop_after=cfg.layer_module) as out, \
                contextlib.suppress(StopForward):
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        h_layer = out[cfg.layer_module]
        self.h_layer = h_layer
        bare = self.bare_rows.to(h_layer.device)
        self.h0 = h_layer[bare, batch.lookup.to(h_layer.device)[bare]].float().clone()
        self.d = h_layer.shape[-1]
        self.kv: Optional[KVSuffix] = None
        if cfg.reuse_prefix and KVSuffix.supported(model, cfg.layer_module, cfg.loss_layer_module, cfg.ln_f_module,
                                                   batch.input_ids.shape[1]):
            self.kv = KVSuffix(model, cfg.layer_module, cfg.loss_layer_module, cfg.ln_f_module, h_layer,
                               batch.attention_mask, self.start, self.end)
        elif cfg.reuse_prefix:
            _note_fallback(model)
        self.kl_init: Optional[torch.Tensor] = None  # [n, vocab] log-probs at delta = 0

    def _hidden_full(self, rows: torch.Tensor, delta_rows: torch.Tensor) -> torch.Tensor:
        """Fallback: the full model on the sub-batch with a hook adding the delta; ``[k, seq, d]`` normed."""
        cfg, model = self.cfg, self.model
        ids = self.batch.input_ids[rows.to(self.batch.input_ids.device)]
        mask = self.batch.attention_mask[rows.to(ids.device)]
        lookup = self.batch.lookup[rows.to(ids.device)]
        layer = get_module(model, cfg.layer_module)
        ln_f = get_module(model, cfg.ln_f_module)
        captured = {}

        def add_delta(_m, _a, output):
            hidden = hidden_of(output)
            add = torch.zeros_like(hidden)
            add[torch.arange(len(rows), device=hidden.device), lookup.to(hidden.device)] = delta_rows.to(hidden.device, hidden.dtype)
            hidden = hidden + add
            return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

        def grab(_m, _a, out):
            hidden = hidden_of(out)
            captured["h"] = ln_f(hidden.to(module_device(ln_f, hidden.device))) if cfg.loss_layer_module else hidden
            raise StopForward

        handles = [layer.register_forward_hook(add_delta)]
        target = get_module(model, cfg.loss_layer_module) if cfg.loss_layer_module else ln_f
        handles.append(target.register_forward_hook(grab))
        try:
            with contextlib.suppress(StopForward):
                model(input_ids=ids, attention_mask=mask)
        finally:
            for handle in handles:
                handle.remove()
        return captured["h"]

    def losses(self, reqs: torch.Tensor, delta: torch.Tensor):
        """Per-request ``(loss, nll)`` ``[k]`` for requests ``reqs`` ``[k]`` at residuals ``delta`` ``[k, d]``.

        The first call must cover all requests at ``delta = 0`` (it records the KL reference).
        """
        cfg = self.cfg
        req_list = reqs.tolist()
        rows = torch.tensor([r for i in req_list for r in self.req_rows[i]], dtype=torch.long)
        local = torch.full((self.n,), -1, dtype=torch.long)
        local[reqs.cpu()] = torch.arange(len(req_list))
        row_local = torch.full((len(self.row_req),), -1, dtype=torch.long)
        row_local[rows] = torch.arange(len(rows))
        delta_rows = delta[local[self.row_req[rows]].to(delta.device)]
        keep_t = row_local[self.t_rows] >= 0
        sel_global = torch.cat([self.t_rows[keep_t], self.kl_rows[reqs.cpu()]])  # the loss entries' rows
        sel_abs = torch.cat([self.t_pos[keep_t], self.start[self.kl_rows[reqs.cpu()]]])  # and positions
        if self.kv is not None:
            # rows grouped by how many positions they run (KL rows: 1), so little is padding
            width = (self.end - self.start)[rows]
            parts, order = [], []
            for w in torch.unique(width).tolist():
                group = rows[width == w]
                in_group = torch.full((len(self.row_req),), -1, dtype=torch.long)
                in_group[group] = torch.arange(len(group))
                entries = torch.nonzero(in_group[sel_global] >= 0).flatten()
                g_rows = in_group[sel_global[entries]]
                g_pos = sel_abs[entries] - self.start[sel_global[entries]]
                parts.append(self.kv.step(group, delta_rows[width == w], select=(g_rows, g_pos)))
                order.append(entries)
            selected = torch.cat(parts)[torch.argsort(torch.cat(order)).to(parts[0].device)]
        else:
            hidden = self._hidden_full(rows, delta_rows)
            selected = hidden[row_local[sel_global].to(hidden.device), sel_abs.to(hidden.device)]
        weight = self.head.weight
        logits = self.head(selected.to(device=weight.device, dtype=weight.dtype)).float()
        if self.logits_transform is not None:
            logits = self.logits_transform(logits)
        hdev = self.head_device
        n_t = int(keep_t.sum())
        if cfg.objective == "suppress_answer":
            # -log(1 - p(answer)) per rewriting row, averaged over the request's rows (targets.py's loss)
            entry_rows = self.t_rows[keep_t]
            used_rows, entry_row_local = torch.unique(entry_rows, return_inverse=True)
            nll = suppression_per_request(
                logits[:n_t], self.t_tok[keep_t].to(hdev), entry_row_local.to(hdev),
                local[self.row_req[used_rows]].to(hdev), len(req_list),
            )
        else:
            logp_t = torch.log_softmax(logits[:n_t], dim=-1)
            nll_tok = -logp_t.gather(1, self.t_tok[keep_t].to(hdev)[:, None]).squeeze(1)
            nll = torch.zeros(len(req_list), device=hdev).index_add(
                0, local[self.t_req[keep_t]].to(hdev), nll_tok * self.t_weight[keep_t].to(hdev)
            )
        kl_logp = torch.log_softmax(logits[n_t:], dim=-1)
        if self.kl_init is None:
            if len(req_list) != self.n:
                raise RuntimeError("the first loss evaluation must cover every request (KL reference)")
            self.kl_init = kl_logp.detach()
        kl = (kl_logp.exp() * (kl_logp - self.kl_init[reqs.to(hdev)])).sum(-1)
        h0 = self.h0[reqs.to(self.h0.device)]
        wd = cfg.weight_decay * (delta.norm(dim=1) ** 2) / (h0.norm(dim=1) ** 2)
        return nll + cfg.kl_factor * kl + wd.to(hdev), nll

    def loss_and_grad(self, reqs: torch.Tensor, delta: torch.Tensor):
        """``(loss [k], nll [k], grad [k, d])`` of requests ``reqs`` with residuals ``delta`` ``[n, d]`` (float32, on
        the residual's device); only the requests ``reqs`` are run."""
        x = delta.detach()[reqs].clone().requires_grad_(True)
        loss, nll = self.losses(reqs, x)
        (grad,) = torch.autograd.grad(loss.sum(), x)
        return loss.detach().to(delta.device), nll.detach().to(delta.device), grad


def optimise_chunk_fast(model, tok, requests, target_ids, prefixes, cfg):
    """One chunk with ``cfg.optimizer == "adam_kv"``: ``(z, h0, nll, steps_run)`` on the CPU."""
    problem = _Problem(model, tok, requests, target_ids, prefixes, cfg)
    if cfg.optimizer == "adam_kv":
        delta, nll, steps = adam_targets(problem, cfg)
    else:
        raise ValueError(f"unknown targets optimizer {cfg.optimizer!r}; choose from {OPTIMIZERS}")
    h0 = problem.h0
    return (h0 + delta.to(h0.device)).cpu(), h0.cpu(), nll.detach().cpu(), steps
