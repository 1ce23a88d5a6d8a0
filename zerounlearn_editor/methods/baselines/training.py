"""The fine-tuning loop shared by the GA and NPO baselines.

Each step is one forward/backward pass over all forget requests together: ``prompt + " " +
answer`` right-padded into one batch, teacher-forced, only the answer tokens scored (found as
the metrics find them; :mod:`zerounlearn_editor.evaluation.teacher_forcing`). The method
is a :data:`ForgetObjective` of the summed answer log-probabilities under the current and the
unedited (reference) weights. float16/bfloat16 models run forward/backward in their dtype and
update through float32 master copies of the trained parameters.
"""
from __future__ import annotations

import contextlib
import copy as copy_module
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn
from tqdm.auto import tqdm

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.engine.requests import ForgetRequest, RequestError, normalize_requests
from zerounlearn_editor.evaluation.teacher_forcing import (
    AnswerBatch,
    answer_rows,
    encode_answers,
    nll_loss,
    pad_rows,
    sequence_log_probs,
    text_rows,
)
from zerounlearn_editor.methods.baselines.config import BaselineHyperParams
from zerounlearn_editor.support.model_access import check_layers, model_device, parameter_name_of_weight

LOG = logging.getLogger(__name__)

ForgetObjective = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(logp [n], ref_logp [n], n_tokens [n]) -> scalar loss`` (summed answer log-probs per request)."""


def trainable_parameters(model: nn.Module, hparams: BaselineHyperParams) -> Dict[str, nn.Parameter]:
    """The parameters to train by ``named_parameters()`` name: the weight of ``rewrite_module_tmp`` at each of
    ``layers`` (``target_modules: layers``) or every parameter (``all``; tied weights once)."""
    params = dict(model.named_parameters())
    if hparams.target_modules == "all":
        return params
    check_layers(model, hparams.layers, hparams.rewrite_module_tmp)
    out: Dict[str, nn.Parameter] = {}
    for layer in hparams.layers:
        name = parameter_name_of_weight(model, hparams.rewrite_module_tmp.format(layer))
        if name not in params:
            raise ValueError(f"parameter {name!r} is not among the model's named_parameters() (tied?)")
        out[name] = params[name]
    return out


@contextlib.contextmanager
def _only_trained_require_grad(model: nn.Module, trained: Mapping[str, nn.Parameter]) -> Iterator[None]:
    """Only ``trained`` requires grad inside; the ``requires_grad`` flags and trained ``.grad`` restored."""
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    grads = {name: p.grad for name, p in trained.items()}
    try:
        for _, p in model.named_parameters():
            p.requires_grad_(False)
        for name, p in trained.items():
            p.requires_grad_(True)
            p.grad = None
        yield
    finally:
        for name, p in model.named_parameters():
            p.requires_grad_(flags[name])
        for name, p in trained.items():
            p.grad = grads[name]


_HALF = (torch.float16, torch.bfloat16)


class _Updater:
    """Optimiser over the trained parameters, with float32 master copies of half-precision ones.

    A pure-half AdamW overflows (float16) or drops updates below the weights' rounding step
    (bfloat16): such parameters are updated in float32 and rounded back after each step.
    """

    def __init__(self, params: Sequence[nn.Parameter], hparams: BaselineHyperParams):
        self.params = list(params)
        self.masters: List[Optional[torch.Tensor]] = [
            p.detach().float().clone().requires_grad_(True) if p.dtype in _HALF else None for p in self.params
        ]
        self.leaves = [m if m is not None else p for p, m in zip(self.params, self.masters)]
        self.max_grad_norm = hparams.max_grad_norm
        if hparams.optimizer == "adam":
            self.optimizer: torch.optim.Optimizer = torch.optim.AdamW(
                self.leaves, lr=hparams.lr, weight_decay=hparams.weight_decay
            )
        else:
            self.optimizer = torch.optim.SGD(self.leaves, lr=hparams.lr, weight_decay=hparams.weight_decay)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        """Clip (if configured) and apply one update from the parameters' current ``.grad``."""
        for p, m in zip(self.params, self.masters):
            if m is not None:
                m.grad = None if p.grad is None else p.grad.float()
                p.grad = None
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.leaves, self.max_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters):
                if m is not None:
                    p.copy_(m)


@dataclass
class TrainReport:
    """What a baseline run did. ``loss``/``forget_logp`` (mean summed answer log-prob)/``retain_nll``: per
    step, before its update; ``final_forget_logp``: after the last update."""

    steps: int = 0
    seconds: float = 0.0
    dtype: str = ""
    trained_parameters: List[str] = field(default_factory=list)
    reference_logp: List[float] = field(default_factory=list)
    loss: List[float] = field(default_factory=list)
    forget_logp: List[float] = field(default_factory=list)
    retain_nll: List[float] = field(default_factory=list)
    final_forget_logp: float = float("nan")


def train_unlearning(
    model: nn.Module,
    tok,
    forget: Sequence[ForgetRequest],
    hparams: BaselineHyperParams,
    objective: ForgetObjective,
    retain: Optional[AnswerBatch] = None,
    progress: bool = True,
) -> Tuple[Dict[str, torch.Tensor], TrainReport]:
    """Train ``model`` in place; returns (original values of the trained parameters, report).

    Loss per step: ``objective(logp, ref_logp, n_tokens) + retain_weight * NLL(retain)`` (the retain
    term when ``retain`` is given and ``retain_weight > 0``). On any error the weights are restored.
    """
    report = TrainReport()
    trained = trainable_parameters(model, hparams)
    report.trained_parameters = list(trained)
    dtype = next(iter(trained.values())).dtype
    report.dtype = str(dtype).replace("torch.", "")
    if dtype != torch.float32:
        LOG.warning("model dtype is %s: forward/backward run in it, updates go through float32 master copies",
                    report.dtype)
    device = model_device(model)
    batch = encode_answers(tok, [(r.prompt, r.answer) for r in forget]).to(device)
    n_tokens = batch.n_tokens
    use_retain = retain is not None and hparams.retain_weight > 0
    if use_retain:
        retain = retain.to(device)
    weights_copy = {name: p.detach().clone() for name, p in trained.items()}
    start = time.perf_counter()
    try:
        # eval mode: no dropout; the caller's RNG state (every CUDA device's, if the model uses CUDA), modes
        # and flags are given back
        cuda = any(p.device.type == "cuda" for p in model.parameters())
        rng = torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else [])
        with rng, eval_mode(model), _only_trained_require_grad(model, trained):
            torch.manual_seed(hparams.seed)
            with torch.no_grad():
                ref_logp = sequence_log_probs(model, batch).detach()
            report.reference_logp = ref_logp.tolist()
            updater = _Updater(list(trained.values()), hparams)
            bar = tqdm(range(hparams.num_steps), desc=f"{hparams.alg_name}", disable=not progress, leave=False)
            for _ in bar:
                updater.zero_grad()
                logp = sequence_log_probs(model, batch)
                loss = objective(logp, ref_logp, n_tokens)
                if use_retain:
                    retain_nll = nll_loss(sequence_log_probs(model, retain), retain.n_tokens)
                    loss = loss + hparams.retain_weight * retain_nll
                    report.retain_nll.append(retain_nll.item())
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{hparams.alg_name}: non-finite loss at step {report.steps}")
                loss.backward()
                updater.step()
                report.steps += 1
                report.loss.append(loss.item())
                report.forget_logp.append(float(logp.detach().mean()))
                bar.set_postfix(loss=f"{report.loss[-1]:.3f}", logp=f"{report.forget_logp[-1]:.2f}")
                LOG.debug("step %d: loss %.4f, forget logp %.3f", report.steps, report.loss[-1], report.forget_logp[-1])
            updater.zero_grad()
            del updater
            with torch.no_grad():
                report.final_forget_logp = float(sequence_log_probs(model, batch).mean())
    except BaseException:
        restore_weights(model, weights_copy)
        raise
    report.seconds = time.perf_counter() - start
    LOG.info("%s: %d steps in %.1fs on %d parameter tensor(s); mean answer log-prob %.3f -> %.3f",
             hparams.alg_name, report.steps, report.seconds, len(trained), float(ref_logp.mean()),
             report.final_forget_logp)
    return weights_copy, report


def _retain_batch(tok, kwargs: Mapping[str, Any]) -> Optional[AnswerBatch]:
    """Retain data from the ``retain_requests``/``retain_texts`` keyword arguments, or None.

    ``retain_requests``: :class:`Probe` objects or dicts with ``prompt`` and ``ground_truth``
    (loss on the answer tokens). ``retain_texts``: strings (loss on every token after the first).
    """
    rows: List[List[int]] = []
    starts: List[int] = []
    requests = kwargs.get("retain_requests")
    if requests:
        pairs = []
        for index, request in enumerate(requests):
            if isinstance(request, Probe):
                pairs.append((request.prompt, request.answer))
                continue
            if not isinstance(request, Mapping) or "prompt" not in request or "ground_truth" not in request:
                raise ValueError(f"retain request {index}: expected a Probe or a dict with 'prompt' and 'ground_truth'")
            answer = request["ground_truth"]
            answer = answer[0] if isinstance(answer, (list, tuple)) and answer else answer
            if not isinstance(request["prompt"], str) or not isinstance(answer, str) or not answer.strip():
                raise ValueError(f"retain request {index}: 'prompt' and 'ground_truth' must be non-empty strings")
            pairs.append((request["prompt"], answer))
        rows, starts = answer_rows(tok, pairs)
    texts = kwargs.get("retain_texts")
    if texts:
        extra_rows, text_starts = text_rows(tok, [texts] if isinstance(texts, str) else texts)
        rows, starts = rows + extra_rows, starts + text_starts
    return pad_rows(tok, rows, starts) if rows else None


def apply_baseline(
    model: nn.Module,
    tok,
    requests: Sequence[Mapping[str, Any]],
    hparams: BaselineHyperParams,
    objective: ForgetObjective,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """EasyEdit's calling convention around :func:`train_unlearning`; returns ``(model, weights_copy)``.

    ``copy=True`` (or ``keep_original_weight=True``) trains a deep copy. ``weights_copy`` maps the
    trained parameters' ``named_parameters()`` names to their original values when
    ``return_orig_weights`` is set, else it is empty. Keyword arguments used: ``retain_requests``,
    ``retain_texts``, ``progress`` and ``report`` (a :class:`TrainReport` to fill).
    """
    forget = normalize_requests(requests)  # fail before any copy is made
    for request in forget:
        if request.answer is None:
            raise RequestError(f"request {request.index}: missing field 'ground_truth' (the answer to train away)")
    retain = _retain_batch(tok, kwargs)
    if retain is not None and hparams.retain_weight == 0:
        LOG.warning("retain data given but retain_weight is 0: no retain loss is used")
    if retain is None and hparams.retain_weight > 0:
        LOG.warning(
            "retain_weight is %g but no retain_requests/retain_texts given: no retain loss", hparams.retain_weight
        )
    trainable_parameters(model, hparams)  # module errors before any copy is made
    if copy or keep_original_weight:
        model = copy_module.deepcopy(model)
    weights_copy, report = train_unlearning(
        model, tok, forget, hparams, objective, retain=retain, progress=kwargs.get("progress", True)
    )
    target_report = kwargs.get("report")
    if isinstance(target_report, TrainReport):
        target_report.__dict__.update(report.__dict__)
    return model, (weights_copy if return_orig_weights else {})
