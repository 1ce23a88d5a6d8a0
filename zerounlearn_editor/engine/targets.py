"""Neutral target states: one residual delta per request at the last edited layer.

For each request a vector ``delta_i`` ``[d_model]`` is added to the output of the last edited
layer at the lookup token. All requests of a chunk share one forward/backward pass per step:
rows are (request x context) rewriting prompts followed by the neutral target tokens, plus
one ``"{subject} is a"`` row per request for the KL term. Requests are independent: Adam is
elementwise and each loss term only touches its own delta, so the batched loop gives the same
deltas as one loop per request (a converged request is frozen, exactly as if its own loop had
stopped).
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.engine.model_access import (
    StopForward,
    capture_outputs,
    get_module,
    hidden_of,
    hidden_size_of,
    logits_transform,
    model_device,
    module_device,
    num_hidden_layers,
)
from zerounlearn_editor.engine.requests import ForgetRequest
from zerounlearn_editor.engine.target_rows import (
    answer_logprobs,
    encode_target_rows,
    suppression_loss,
    suppression_per_request,
)
from zerounlearn_editor.engine.adam import adam_targets
from zerounlearn_editor.engine.targets_kv import optimise_chunk_fast

__all__ = ["TargetConfig", "NeutralTargets", "optimise_neutral_targets", "target_loop", "answer_logprobs", "suppression_loss", "suppression_per_request", "TARGET_OBJECTIVES"]

LOG = logging.getLogger(__name__)


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
    # "adam": the paper's loop below (this low-level default; the hparams key defaults to "adam_kv");
    # "adam_kv": see targets_fast
    optimizer: str = "adam"
    # "neutral": per target token the NLL -log p (the paper); "suppress_answer": the target tokens are the
    # request's answer and the loss is -log(1 - p(answer)) per rewriting row (opt-in)
    objective: str = "neutral"


@dataclass
class NeutralTargets:
    """``z`` ``[n, d_model]`` = ``h0 + delta``; ``h0`` the unedited hidden state; ``nll`` ``[n]``."""

    z: torch.Tensor
    h0: torch.Tensor
    nll: torch.Tensor
    steps_run: List[int]


TARGET_OBJECTIVES = ("neutral", "suppress_answer")


def target_loop(cfg: TargetConfig) -> str:
    """The optimiser that runs for ``cfg`` (``cfg.optimizer``). Cache keys name this loop."""
    return cfg.optimizer


_SUFFIX_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


class _SuffixStack:
    """Runs only the decoder layers after the edited one, on cached hidden states.

    For decoder stacks whose ``inputs_embeds`` enter the first layer unchanged (Llama, Mistral,
    Qwen2/3), the base model's own forward over a shortened layer list computes exactly what
    the full model computes from layer ``start`` on: the residual before layer ``start`` is
    computed once per chunk instead of once per optimisation step.
    """

    def __init__(self, model: nn.Module, layer_module: nn.Module, stop: Optional[int]):
        base = model.model
        layers = list(base.layers)
        start = next(i for i, layer in enumerate(layers) if layer is layer_module) + 1
        self.base, self.full = base, base.layers
        self.suffix = nn.ModuleList(layers[start:stop])

    @staticmethod
    def supported(model: nn.Module, cfg: "TargetConfig") -> bool:
        base = getattr(model, "model", None)
        if getattr(model.config, "model_type", None) not in _SUFFIX_MODEL_TYPES or base is None:
            return False
        if not isinstance(getattr(base, "layers", None), nn.ModuleList) or getattr(base, "norm", None) is None:
            return False
        layer = get_module(model, cfg.layer_module)
        return any(layer is l for l in base.layers) and get_module(model, cfg.ln_f_module) is base.norm

    def __call__(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states ``[rows, seq, d_model]`` from layer-``start`` inputs."""
        self.base.layers = self.suffix
        try:
            return self.base(inputs_embeds=hidden, attention_mask=attention_mask, use_cache=False).last_hidden_state
        finally:
            self.base.layers = self.full

def _head_logits(lm_head: nn.Module, hidden: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                 transform=None) -> torch.Tensor:
    """``lm_head`` at ``hidden[rows, positions]``: float32 logits ``[len(rows), vocab]`` on the head's device.

    ``hidden`` may live on another device than the index tensors and the head (layers split
    across devices); each tensor is moved to the device of the tensor or module consuming it.
    ``transform``: the model's own map of the head's output (:func:`~zerounlearn_editor.engine.model_access.logits_transform`).
    """
    selected = hidden[rows.to(hidden.device), positions.to(hidden.device)]
    weight = lm_head.weight
    logits = lm_head(selected.to(device=weight.device, dtype=weight.dtype)).float()
    return logits if transform is None else transform(logits)


def _forward_logits_rows(model, cfg: TargetConfig, batch, delta_rows_hook, rows, positions) -> torch.Tensor:
    """Run the forward with the delta hook and return logits ``[len(rows), vocab]`` at (rows, positions)."""
    layer = get_module(model, cfg.layer_module)
    ln_f = get_module(model, cfg.ln_f_module)
    lm_head = get_module(model, cfg.lm_head_module)
    captured = {}
    handles = [layer.register_forward_hook(delta_rows_hook)]
    if cfg.loss_layer_module:
        def grab_layer(_m, _a, out):
            hidden = hidden_of(out)
            captured["h"] = ln_f(hidden.to(module_device(ln_f, hidden.device)))
            raise StopForward

        handles.append(get_module(model, cfg.loss_layer_module).register_forward_hook(grab_layer))
    else:
        def grab_norm(_m, _a, out):
            captured["h"] = hidden_of(out)
            raise StopForward

        handles.append(ln_f.register_forward_hook(grab_norm))
    try:
        with contextlib.suppress(StopForward):
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    finally:
        for handle in handles:
            handle.remove()
    return _head_logits(lm_head, captured["h"], rows, positions, logits_transform(model))


class _FullForwardProblem:
    """The loss of one chunk by full forward passes (``targets_optimizer: adam``, the reference evaluation).

    Every evaluation runs all rows of the chunk (request-major rewriting rows, then one KL row per request), the
    residuals added at the edited layer's lookup tokens by a hook, or, for Llama-family stacks, by
    :class:`_SuffixStack` on the cached input of the layers after it. Rows of stopped requests run too (with
    their frozen residuals), so the batch is the same at every step.
    """

    def __init__(self, model: nn.Module, tok, requests: Sequence[ForgetRequest], target_ids: Sequence[Sequence[int]],
                 prefixes: Sequence[str], cfg: TargetConfig):
        self.model, self.cfg = model, cfg
        device = model_device(model)  # input ids
        head_device = get_module(model, cfg.lm_head_module).weight.device  # logits and the loss
        self.head_device = head_device
        n, n_ctx = len(requests), len(prefixes)
        self.n = n
        rows_ = encode_target_rows(tok, requests, target_ids, prefixes, cfg.fact_token, device)
        self.batch, rw_req = rows_.batch, rows_.rw_req
        n_rw = len(rw_req)
        self.n_t = len(rows_.t_rows)
        self.t_rows_t = torch.tensor(rows_.t_rows, device=head_device)
        t_pos_t = torch.tensor(rows_.t_pos, device=head_device)
        self.t_tok_t = torch.tensor(rows_.t_tok, device=head_device)
        self.t_weight_t = torch.tensor(rows_.t_weight, device=head_device)
        self.t_req_t = torch.tensor(rows_.t_req, device=head_device)
        self.rw_req_h = torch.tensor(rw_req, dtype=torch.long, device=head_device)  # each rewriting row's request
        kl_rows = torch.arange(n_rw, n_rw + n, device=head_device)
        kl_pos = self.batch.lookup[n_rw : n_rw + n].to(head_device)
        self.rows = torch.cat([self.t_rows_t, kl_rows])
        self.positions = torch.cat([t_pos_t, kl_pos])
        bare_rows = torch.arange(0, n_rw, n_ctx, device=device)
        self.d = hidden_size_of(model)
        layer_device = next(get_module(model, cfg.layer_module).parameters()).device
        row_req = torch.tensor(rw_req + list(range(n)), device=device)
        # index tensors on the edited layer's device (where its hidden states and the residuals live)
        self.row_req_l, self.lookup_l = row_req.to(layer_device), self.batch.lookup.to(layer_device)
        bare_rows_l = bare_rows.to(layer_device)
        self.suffix: Optional[_SuffixStack] = None
        self.kl_init: Optional[torch.Tensor] = None
        with torch.no_grad(), capture_outputs(model, [cfg.layer_module], stop_after=cfg.layer_module) as out, \
                contextlib.suppress(StopForward):
            model(input_ids=self.batch.input_ids, attention_mask=self.batch.attention_mask)
        h_layer = out[cfg.layer_module]
        self.h0 = h_layer[bare_rows_l, self.lookup_l[bare_rows_l]].float().clone()  # [n, d]
        if cfg.reuse_prefix and _SuffixStack.supported(model, cfg):
            stop = None
            if cfg.loss_layer_module:
                loss_layer = get_module(model, cfg.loss_layer_module)
                stop = next(i for i, l in enumerate(model.model.layers) if l is loss_layer) + 1
            self.suffix = _SuffixStack(model, get_module(model, cfg.layer_module), stop)
            self.h_layer = h_layer
            self.all_rows = torch.arange(len(row_req), device=h_layer.device)
            self.lm_head = get_module(model, cfg.lm_head_module)

    def _logits(self, row_delta: torch.Tensor) -> torch.Tensor:
        """``[rows, vocab]`` logits of the loss rows with each row's residual ``row_delta`` ``[all rows, d]``."""
        cfg = self.cfg
        if self.suffix is None:
            def add_delta(_module, _args, output):
                hidden = hidden_of(output)
                add = torch.zeros_like(hidden)
                add[torch.arange(len(self.row_req_l), device=hidden.device), self.lookup_l] = row_delta.to(hidden.dtype)
                hidden = hidden + add
                if isinstance(output, tuple):
                    return (hidden,) + tuple(output[1:])
                return hidden

            return _forward_logits_rows(self.model, cfg, self.batch, add_delta, self.rows, self.positions)
        add = torch.zeros_like(self.h_layer)
        add[self.all_rows, self.lookup_l] = row_delta.to(self.h_layer.dtype)
        normed = self.suffix(self.h_layer + add, self.batch.attention_mask)
        return _head_logits(self.lm_head, normed, self.rows, self.positions, logits_transform(self.model))

    def loss_and_grad(self, reqs: torch.Tensor, delta: torch.Tensor):
        """``(loss [k], nll [k], grad [k, d])`` of requests ``reqs`` ``[k]``; every request's rows run with its
        residual in ``delta`` ``[n, d]``."""
        cfg, n, hdev = self.cfg, self.n, self.head_device
        x = delta.detach().clone().requires_grad_(True)
        logits = self._logits(x[self.row_req_l])
        if cfg.objective == "suppress_answer":
            nll_req = suppression_per_request(logits[: self.n_t].float(), self.t_tok_t, self.t_rows_t, self.rw_req_h, n)
        else:
            logp_t = torch.log_softmax(logits[: self.n_t], dim=-1)
            nll_tok = -logp_t.gather(1, self.t_tok_t[:, None]).squeeze(1)
            nll_req = torch.zeros(n, device=hdev).index_add(0, self.t_req_t, nll_tok * self.t_weight_t)
        kl_logp = torch.log_softmax(logits[self.n_t : self.n_t + n], dim=-1)
        if self.kl_init is None:
            if len(reqs) != n:
                raise RuntimeError("the first loss evaluation must cover every request (KL reference)")
            self.kl_init = kl_logp.detach()
        kl_req = (kl_logp.exp() * (kl_logp - self.kl_init)).sum(-1)
        wd_req = cfg.weight_decay * (x.norm(dim=1) ** 2) / (self.h0.norm(dim=1) ** 2)
        loss_req = nll_req + cfg.kl_factor * kl_req + wd_req.to(hdev)
        picked = reqs.to(hdev)
        (grad,) = torch.autograd.grad(loss_req[picked].sum(), x)
        return (loss_req.detach()[picked].to(delta.device), nll_req.detach()[picked].to(delta.device),
                grad[reqs.to(grad.device)])


def _optimise_chunk(
    model: nn.Module,
    tok,
    requests: Sequence[ForgetRequest],
    target_ids: Sequence[Sequence[int]],
    prefixes: Sequence[str],
    cfg: TargetConfig,
):
    """One chunk: ``(z, h0, nll, steps_run)`` (``z``, ``h0`` ``[n, d_model]``, ``nll`` ``[n]``) on the CPU."""
    if cfg.objective not in TARGET_OBJECTIVES:
        raise ValueError(f"unknown target objective {cfg.objective!r}; expected one of {TARGET_OBJECTIVES}")
    if target_loop(cfg) != "adam":
        return optimise_chunk_fast(model, tok, requests, target_ids, prefixes, cfg)
    problem = _FullForwardProblem(model, tok, requests, target_ids, prefixes, cfg)
    delta, nll, steps_run = adam_targets(problem, cfg)
    h0 = problem.h0
    return (h0 + delta.to(h0.device)).cpu(), h0.cpu(), nll.cpu(), steps_run


def optimise_neutral_targets(
    model: nn.Module,
    tok,
    requests: Sequence[ForgetRequest],
    target_ids: Sequence[Sequence[int]],
    prefixes: Sequence[str],
    cfg: TargetConfig,
) -> NeutralTargets:
    """Optimise one residual per request (in chunks of ``cfg.chunk_size`` requests).

    ``target_ids[i]`` are the neutral target's token ids for request ``i``. The model's
    parameters are frozen during the loop and its train/eval mode is restored afterwards.
    """
    was_training = model.training
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.eval()
    for p, _ in flags:
        p.requires_grad_(False)
    zs, h0s, nlls, steps = [], [], [], []
    try:
        with torch.enable_grad():
            for start in range(0, len(requests), cfg.chunk_size):
                z, h0, nll, run = _optimise_chunk(
                    model,
                    tok,
                    requests[start : start + cfg.chunk_size],
                    target_ids[start : start + cfg.chunk_size],
                    prefixes,
                    cfg,
                )
                zs.append(z)
                h0s.append(h0)
                nlls.append(nll)
                steps.extend(run)
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
        model.train(was_training)
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
