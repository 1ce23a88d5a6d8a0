"""Neutral target states: one residual ``delta_i`` ``[d_model]`` per request, added to the last edited layer's
output at the lookup token.

A chunk's rows are (request x context) rewriting prompts followed by the target tokens, plus one
``"{subject} is a"`` row per request for the KL term. Loss per request: the weighted target NLL (or, with
``suppress_answer``, the mean ``-log(1 - p(answer))``) + ``kl_factor`` KL(initial || now) + ``weight_decay
|delta|^2 / |h0|^2``. Requests are independent, so the batched loop gives the deltas of one loop per request.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from zerounlearn_editor.engine.adam import adam_targets
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.requests import ForgetRequest
from zerounlearn_editor.engine.targets.kv_suffix import OPTIMIZERS, KVSuffix, SuffixLayers, note_kv_fallback
from zerounlearn_editor.engine.targets.layer_kv import LayerKV
from zerounlearn_editor.engine.targets.ranking import (
    alternative_pools,
    answer_first_tokens,
    pick_alternatives,
    rank_below_loss,
)
from zerounlearn_editor.engine.targets.rows import answer_ranks, encode_target_rows, suppression_per_request
from zerounlearn_editor.support.model_access import (
    StopForward,
    capture_outputs,
    get_module,
    hidden_of,
    logits_transform,
    model_device,
    module_device,
    num_hidden_layers,
)


@dataclass(frozen=True)
class TargetConfig:
    """The target-optimisation settings (a subset of the method's hparams)."""

    layer_module: str  # output of this module gets the delta (last edited layer)
    ln_f_module: str
    lm_head_module: str
    loss_layer_module: str  # ``ln_f`` input comes from here; empty -> the model's own ln_f input
    fact_token: str
    steps: int
    lr: float
    weight_decay: float
    clamp_norm_factor: float
    kl_factor: float
    early_stop_loss: float
    chunk_size: int
    reuse_prefix: bool = True  # run only the layers after the edited one per step, where supported
    # "adam": every row on full forwards (this low-level default; the hparams key defaults to "adam_kv");
    # "adam_kv": the active rows on the KV-cached suffix (see .kv_suffix)
    optimizer: str = "adam"
    # "neutral": per target token the NLL -log p (the paper); "suppress_answer": the target tokens are the
    # request's answer and the loss is -log(1 - p(answer)) per rewriting row (opt-in)
    objective: str = "neutral"
    # rank_below_alternatives (opt-in; see .ranking): weight 0 = off, the paper's objective
    rank_weight: float = 0.0
    rank_margin: float = 0.0
    rank_k: int = 0
    # suppress_rank_limit (opt-in): only requests whose answer's first token ranks <= this after the
    # bare prompt (unedited model; 0 = the argmax) take target steps; None = every request (the paper's loop)
    step_rank_limit: Optional[int] = None


@dataclass
class NeutralTargets:
    """``z`` ``[n, d_model]`` = ``h0 + delta``; ``h0`` the unedited hidden state; ``nll`` ``[n]``."""

    z: torch.Tensor
    h0: torch.Tensor
    nll: torch.Tensor
    steps_run: List[int]


TARGET_OBJECTIVES = ("neutral", "suppress_answer")

FAR_ABOVE_STOP_FACTOR = 10.0
FAR_ABOVE_STOP_FLOOR = math.log(10.0)
"""A final target loss is *far above* the stop value ``v_early_stop_loss`` when it exceeds
``max(FAR_ABOVE_STOP_FACTOR * v_early_stop_loss, FAR_ABOVE_STOP_FLOOR)``: ten times the stop value, and at least
ln 10 = 2.30 nats, where the neutral target's mean per-token probability is below 10% (``suppress_answer``:
the answer's probability above 90%). The shipped settings end near 1 nat on SmolLM2 (benchmarks/RESULTS.md's speed
runs: means 0.84 and 1.05 over 50 and 10 facts), under it; an unoptimised target (``v_num_grad_steps: 0``) stays
where it starts, near 12 there."""


def far_above_stop(nll: torch.Tensor, early_stop_loss: float) -> List[int]:
    """Positions ``i`` of ``nll`` ``[n]`` (final target losses) far above the stop value (see
    :data:`FAR_ABOVE_STOP_FACTOR`); a non-finite loss counts as far above."""
    limit = max(FAR_ABOVE_STOP_FACTOR * early_stop_loss, FAR_ABOVE_STOP_FLOOR)
    return [i for i, value in enumerate(nll.tolist()) if not value <= limit]


class _Problem:
    """The rows of one chunk and the loss of its requests at given residuals (the loop's ``TargetProblem``).

    Rows are request-major rewriting rows, then one KL row per request. ``adam`` evaluates every row at each
    step (stopped requests with their frozen residuals, so the batch never changes): Llama-family stacks run
    :meth:`SuffixLayers.run_stack` on the edited layer's cached output, others a full forward with a hook
    adding the residuals. ``adam_kv`` evaluates only the active requests' rows, on the :class:`KVSuffix` where
    supported, else on the :class:`LayerKV` (the model's own layers with a cache) where it passes its check at
    ``delta = 0``, else by full forwards of those rows.
    """

    def __init__(self, model, tok, requests: Sequence[ForgetRequest], target_ids, prefixes,
                 cfg: TargetConfig, rank: Optional[Tuple[List[int], List[List[int]]]] = None):
        self.model, self.cfg = model, cfg
        # the rank term: each request's answer first token and candidate alternatives; the k used are
        # picked at the first evaluation (delta = 0, every request)
        self.rank_answer = torch.tensor(rank[0], dtype=torch.long) if rank else None
        self.rank_pools = rank[1] if rank else None
        self.rank_alts: Optional[torch.Tensor] = None
        self.all_rows = cfg.optimizer == "adam"
        self.head = get_module(model, cfg.lm_head_module)
        self.head_device = self.head.weight.device
        self.logits_transform = logits_transform(model)
        n, n_ctx = len(requests), len(prefixes)
        if cfg.step_rank_limit is not None and (not prefixes or prefixes[0] != ""):
            raise ValueError(f"suppress_rank_limit reads the answer's rank in the bare prompt, the first context "
                             f"prefix, which must be '' (got {list(prefixes)[:1]!r})")
        self.n = n
        rows_ = encode_target_rows(tok, requests, target_ids, prefixes, cfg.fact_token, model_device(model))
        self.batch = batch = rows_.batch
        n_rw = len(rows_.rw_req)
        self.row_req = torch.tensor(rows_.rw_req + list(range(n)))
        self.start = batch.lookup.cpu()
        self.end = self.start + 1
        for row, pos in zip(rows_.t_rows, rows_.t_pos):
            self.end[row] = max(int(self.end[row]), pos + 1)
        self.t_rows = torch.tensor(rows_.t_rows, dtype=torch.long)
        self.t_pos = torch.tensor(rows_.t_pos, dtype=torch.long)
        self.t_tok, self.t_weight = torch.tensor(rows_.t_tok, dtype=torch.long), torch.tensor(rows_.t_weight)
        self.t_req = torch.tensor(rows_.t_req, dtype=torch.long)
        self.t_first = torch.ones(len(self.t_rows), dtype=torch.bool)  # the entry predicting a row's first token
        self.t_first[1:] = self.t_rows[1:] != self.t_rows[:-1]
        self.kl_rows = torch.arange(n_rw, n_rw + n)
        # rows of each request: its n_ctx rewriting rows, then its KL row
        self.req_rows = [list(range(i * n_ctx, (i + 1) * n_ctx)) + [n_rw + i] for i in range(n)]
        with torch.no_grad(), capture_outputs(model, [cfg.layer_module], stop_after=cfg.layer_module) as out, \
                contextlib.suppress(StopForward):
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        self.h_layer = h_layer = out[cfg.layer_module]
        bare = torch.arange(0, n_rw, n_ctx).to(h_layer.device)
        self.h0 = h_layer[bare, batch.lookup.to(h_layer.device)[bare]].float().clone()  # [n, d]
        self.d = h_layer.shape[-1]
        self.stack: Optional[SuffixLayers] = None
        self.kv: Optional[KVSuffix] = None
        layers = (cfg.layer_module, cfg.loss_layer_module, cfg.ln_f_module)
        stack_ok = self.all_rows and SuffixLayers.supported(model, cfg.layer_module, cfg.ln_f_module)
        if cfg.reuse_prefix and stack_ok:
            self.stack = SuffixLayers(model, *layers)
        elif cfg.reuse_prefix and not self.all_rows:
            self.kv = self._cached_suffix(layers)
        self.kl_init: Optional[torch.Tensor] = None  # [n, vocab] log-probs at delta = 0
        self.n_ctx = n_ctx
        # [n]: with suppress_rank_limit, each answer's first-token rank after the bare prompt at delta = 0 (set by
        # the first evaluation); None otherwise
        self.answer_ranks: Optional[torch.Tensor] = None

    def _cached_suffix(self, layers) -> Optional[Union[KVSuffix, LayerKV]]:
        """The cached evaluation of ``adam_kv``: :class:`KVSuffix` for Llama/Mistral/Qwen2/Qwen3 and GPT-2 stacks,
        else :class:`LayerKV` (the model's own layers) if at ``delta = 0`` it equals the full forward on this
        chunk's check rows (:func:`~.layer_kv.check_rows`), else ``None`` (full forwards; the reason is logged once
        per model)."""
        model, batch = self.model, self.batch
        if KVSuffix.supported(model, *layers, batch.input_ids.shape[1]):
            return KVSuffix(model, *layers, self.h_layer, batch.attention_mask, self.start, self.end)
        reason = LayerKV.why_not(model, *layers)
        if reason is None:
            kv = LayerKV(model, *layers, self.h_layer, batch.attention_mask, self.start, self.end)
            rows = kv.check_rows().cpu()  # a few rows stand for the chunk (the full forward of all: 27 s on Gemma)
            with torch.no_grad():
                reason = kv.mismatch(self._hidden(rows, self.h_layer.new_zeros((len(rows), self.d))), rows)
            if reason is None:
                return kv
        note_kv_fallback(model, reason)
        return None

    def _hidden(self, rows: torch.Tensor, delta_rows: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states ``[k, seq, d]`` of ``rows`` ``[k]`` with ``delta_rows`` ``[k, d]`` added
        at their lookup tokens: :meth:`SuffixLayers.run_stack` (every row) or the full model with a hook."""
        cfg, model = self.cfg, self.model
        if self.stack is not None:
            add = torch.zeros_like(self.h_layer)
            add[rows.to(add.device), self.batch.lookup.to(add.device)] = delta_rows.to(self.h_layer.dtype)
            return self.stack.run_stack(self.h_layer + add, self.batch.attention_mask)
        ids = self.batch.input_ids[rows.to(self.batch.input_ids.device)]
        mask = self.batch.attention_mask[rows.to(ids.device)]
        lookup = self.batch.lookup[rows.to(ids.device)]
        ln_f = get_module(model, cfg.ln_f_module)
        captured = {}

        def add_delta(_m, _a, output):
            hidden = hidden_of(output)
            add = torch.zeros_like(hidden)
            add[torch.arange(len(rows), device=hidden.device), lookup.to(hidden.device)] = delta_rows.to(
                hidden.device, hidden.dtype
            )
            hidden = hidden + add
            return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

        def grab(_m, _a, out):
            hidden = hidden_of(out)
            captured["h"] = ln_f(hidden.to(module_device(ln_f, hidden.device))) if cfg.loss_layer_module else hidden
            raise StopForward

        handles = [get_module(model, cfg.layer_module).register_forward_hook(add_delta)]
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
        if self.kl_init is None and len(req_list) != self.n:
            raise RuntimeError("the first loss evaluation must cover every request (the KL reference)")
        if self.all_rows:
            rows = torch.arange(len(self.row_req))
        else:
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
            hidden = self._hidden(rows, delta_rows)
            selected = hidden[row_local[sel_global].to(hidden.device), sel_abs.to(hidden.device)]
        weight = self.head.weight
        logits = self.head(selected.to(device=weight.device, dtype=weight.dtype)).float()
        if self.logits_transform is not None:
            logits = self.logits_transform(logits)
        hdev = self.head_device
        n_t = int(keep_t.sum())
        if cfg.objective.startswith("suppress"):
            # -log(1 - p(answer)) per rewriting row, averaged over the request's rows
            used_rows, entry_row_local = torch.unique(self.t_rows[keep_t], return_inverse=True)
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
        if self.rank_pools is not None:
            nll = nll + cfg.rank_weight * self._rank_term(logits[:n_t], keep_t, local, len(req_list))
        kl_logp = torch.log_softmax(logits[n_t:], dim=-1)
        if self.kl_init is None:
            self.kl_init = kl_logp.detach()
            if cfg.step_rank_limit is not None:
                self.answer_ranks = self._bare_answer_ranks(logits[:n_t].detach())
        kl = (kl_logp.exp() * (kl_logp - self.kl_init[reqs.to(hdev)])).sum(-1)
        h0 = self.h0[reqs.to(self.h0.device)]
        wd = cfg.weight_decay * (delta.norm(dim=1) ** 2) / (h0.norm(dim=1) ** 2)
        return nll + cfg.kl_factor * kl + wd.to(hdev), nll

    def _bare_answer_ranks(self, logits: torch.Tensor) -> torch.Tensor:
        """``[n]``: each request's answer first-token rank in its bare-prompt row (its first rewriting row);
        ``logits`` ``[e, vocab]``: every target entry's, in entry order (the first evaluation covers them all)."""
        bare_first = self.t_first & (self.t_rows % self.n_ctx == 0)
        picked = torch.nonzero(bare_first).flatten()
        ranks = torch.empty(self.n, dtype=torch.long)
        ranks[self.t_req[picked]] = answer_ranks(logits[picked.to(logits.device)],
                                                 self.t_tok[picked].to(logits.device)).cpu()
        return ranks

    def _rank_term(self, logits: torch.Tensor, keep_t: torch.Tensor, local: torch.Tensor, k: int) -> torch.Tensor:
        """Per evaluated request ``[k]``: the mean over its rewriting rows of :func:`rank_below_loss` at the answer
        position. ``logits`` ``[e, vocab]``: the kept target entries' (``keep_t`` over all entries); ``local``
        maps a request to its place among the evaluated ones."""
        first = self.t_first[keep_t]
        req = self.t_req[keep_t][first]
        at_answer = logits[first.to(logits.device)]
        if self.rank_alts is None:
            self.rank_alts = pick_alternatives(at_answer.detach(), req, self.rank_pools, self.cfg.rank_k)
        hdev = logits.device
        per_entry = rank_below_loss(at_answer, self.rank_answer[req].to(hdev), self.rank_alts[req].to(hdev),
                                    self.cfg.rank_margin)
        where = local[req].to(hdev)
        counts = torch.bincount(where, minlength=k).clamp_min(1).to(per_entry.dtype)
        return torch.zeros(k, device=hdev, dtype=per_entry.dtype).index_add(0, where, per_entry) / counts

    def loss_and_grad(self, reqs: torch.Tensor, delta: torch.Tensor):
        """``(loss [k], nll [k], grad [k, d])`` of requests ``reqs`` ``[k]`` with residuals ``delta`` ``[n,
        d]``."""
        if not self.all_rows:
            x = delta.detach()[reqs].clone().requires_grad_(True)
            loss, nll = self.losses(reqs, x)
            (grad,) = torch.autograd.grad(loss.sum(), x)
            return loss.detach().to(delta.device), nll.detach().to(delta.device), grad
        x = delta.detach().clone().requires_grad_(True)
        loss, nll = self.losses(torch.arange(self.n, device=reqs.device), x)
        picked = reqs.to(self.head_device)
        (grad,) = torch.autograd.grad(loss[picked].sum(), x)
        loss, nll = loss.detach()[picked].to(delta.device), nll.detach()[picked].to(delta.device)
        return loss, nll, grad[reqs.to(grad.device)]


def optimise_neutral_targets(
    model: nn.Module,
    tok,
    requests: Sequence[ForgetRequest],
    target_ids: Sequence[Sequence[int]],
    prefixes: Sequence[str],
    cfg: TargetConfig,
) -> NeutralTargets:
    """Optimise one residual per request, ``cfg.chunk_size`` requests at a time (``target_ids[i]``: request
    ``i``'s target token ids), with the model's parameters frozen and in eval mode (both restored after)."""
    if cfg.objective not in TARGET_OBJECTIVES:
        raise ValueError(f"unknown target objective {cfg.objective!r}; expected one of {TARGET_OBJECTIVES}")
    if cfg.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown targets optimizer {cfg.optimizer!r}; choose from {OPTIMIZERS}")
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    zs, h0s, nlls, steps = [], [], [], []
    rank = None
    if cfg.rank_weight > 0:  # the alternatives come from the whole edit, so chunking does not change them
        rank = (answer_first_tokens(tok, requests), alternative_pools(tok, requests))
    try:
        with torch.enable_grad(), eval_mode(model):
            for start in range(0, len(requests), cfg.chunk_size):
                chunk = slice(start, start + cfg.chunk_size)
                part = (rank[0][chunk], rank[1][chunk]) if rank else None
                problem = _Problem(model, tok, requests[chunk], target_ids[chunk], prefixes, cfg, part)
                delta, nll, run = adam_targets(problem, cfg)
                zs.append((problem.h0 + delta.to(problem.h0.device)).cpu())
                h0s.append(problem.h0.cpu())
                nlls.append(nll.cpu())
                steps.extend(run)
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
    return NeutralTargets(z=torch.cat(zs), h0=torch.cat(h0s), nll=torch.cat(nlls), steps_run=steps)


def loss_layer_module(model: nn.Module, v_loss_layer: int, layer_module_tmp: str) -> str:
    """The module whose output feeds the loss: empty for the last layer (use the model's ln_f)."""
    last = num_hidden_layers(model) - 1
    if v_loss_layer > last or v_loss_layer < -1:
        raise ValueError(
            f"key 'v_loss_layer' is {v_loss_layer}, but the model has {last + 1} layers (0..{last}); "
            "use -1 for the model's last layer"
        )
    if v_loss_layer < 0 or v_loss_layer >= last:
        return ""
    return layer_module_tmp.format(v_loss_layer)
