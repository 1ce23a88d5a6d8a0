"""The layer-by-layer edit shared by ZeroUnlearn and ZeroUnlearn-GD (each stage timed in :class:`EditReport`).

1. check the inputs (:class:`EditPlan`) and find how each edited module's output reaches the residual
   (:mod:`zerounlearn_editor.engine.post_mlp`);
2. utility statistics ``C0`` of every edited layer (cached), context prefixes and neutral targets ``z``;
3. the fluency guard's perplexity of the unedited model;
4. for each edited layer in order: keys ``K_f`` and the hidden state at the last edited layer, the residual
   change ``(z - h) / (layers left)`` mapped to values ``M_n``, the method's float64 solve and the write-back;
5. the guard's perplexity of the edited model: beyond ``fluency_max_increase`` the edit is refused.

If anything fails after the first write-back, every edited weight is restored before the error propagates.
The statistics, targets and keys stages are replaceable (:class:`EditStages`); the solves are not.
"""
from __future__ import annotations

import contextlib
import copy as copy_module
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from zerounlearn_editor.engine.contexts import CONTEXT_SEED, check_fewshot_facts, context_prefixes, fewshot_prefixes
from zerounlearn_editor.engine.encoding import target_token_ids
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.fluency_guard import (
    DEFAULT_MAX_INCREASE,
    GUARD_WINDOW,
    FluencyError,
    guard_chunks,
    guard_perplexity,
    judge_fluency,
    resolve_mode,
)
from zerounlearn_editor.engine.fluency_guard import (
    guard_text as builtin_guard_text,
)
from zerounlearn_editor.engine.hparams import EditHyperParams
from zerounlearn_editor.engine.keys import LayerReadout, read_keys_and_hidden
from zerounlearn_editor.engine.post_mlp import IDENTITY, PostMlpMap, detect_post_mlp_maps, value_targets
from zerounlearn_editor.engine.prefix_replay import LayerPrefixReplay
from zerounlearn_editor.engine.quantized_keys import (
    QuantizedTwin,
    quantized_keys_setting,
    quantized_twin,
    with_quantized_columns,
)
from zerounlearn_editor.engine.requests import (
    CheckedRequests,
    ForgetRequest,
    RequestError,
    check_targets_not_answers,
    normalize_requests,
)
from zerounlearn_editor.engine.retain import RetainSpec, check_retain_disjoint, resolve_retain
from zerounlearn_editor.engine.stats import SecondMoment, StatsRequest, cached_second_moments
from zerounlearn_editor.engine.targets import (
    NeutralTargets,
    TargetConfig,
    far_above_stop,
    loss_layer_module,
    optimise_neutral_targets,
)
from zerounlearn_editor.engine.targets.ranking import alternative_pools, requests_without_alternatives
from zerounlearn_editor.support.memory import release_free_memory
from zerounlearn_editor.support.model_access import (
    check_edited_modules,
    check_layers,
    get_module,
    get_weight_matrix,
    max_positions,
    parameter_name_of_weight,
    set_weight_matrix,
)
from zerounlearn_editor.support.progress import progress_bar, progress_scope

LOG = logging.getLogger(__name__)


@dataclass
class LayerProblem:
    """Everything one layer's solve needs (float64, on the weight's device): ``W`` ``[d_out, d_in]``, ``K_f``
    ``[d_in, n]``, ``M_n`` ``[d_out, n]``, ``C0`` ``[d_in, d_in]``, the retain keys ``K_r`` ``[d_in, n_r]``
    (or None), ``C_ctx`` ``[d_in, d_in]`` the mean ``k k^T`` of the prompts' other positions (when the hparams
    ask for it).
    """

    layer: int
    W: torch.Tensor
    K_f: torch.Tensor
    M_n: torch.Tensor
    C0: torch.Tensor
    K_r: Optional[torch.Tensor] = None
    C_ctx: Optional[torch.Tensor] = None

    @property
    def M_f(self) -> torch.Tensor:
        """``W K_f`` ``[d_out, n]``."""
        return self.W @ self.K_f


LayerSolver = Callable[[LayerProblem], torch.Tensor]
"""Maps a :class:`LayerProblem` to the new weight ``W'`` ``[d_out, d_in]`` (float64)."""


StatisticsStage = Callable[[nn.Module, Any, EditHyperParams, str, bool], Dict[int, SecondMoment]]
"""``(model, tok, hparams, corpus, progress) -> {layer: SecondMoment}`` for every edited layer."""
TargetsStage = Callable[..., NeutralTargets]
"""Same signature as :func:`~zerounlearn_editor.engine.targets.optimise_neutral_targets`."""
KeysStage = Callable[..., LayerReadout]
"""Same signature as :func:`~zerounlearn_editor.engine.keys.read_keys_and_hidden`."""


def batched_statistics(
    model: nn.Module,
    tok,
    hparams: EditHyperParams,
    corpus: str,
    progress: bool = True,
    layers: Optional[Sequence[int]] = None,
) -> Dict[int, SecondMoment]:
    """``C0`` of every edited layer (or of ``layers``): cached files, the missing ones in one pass per batch."""
    return cached_second_moments(model, tok, StatsRequest.of_hparams(hparams, corpus, layers, progress=progress))


@dataclass(frozen=True)
class EditStages:
    """The data-gathering stages of an edit (``bench.reference_pipeline`` swaps them)."""

    statistics: StatisticsStage = batched_statistics
    targets: TargetsStage = optimise_neutral_targets
    keys: KeysStage = read_keys_and_hidden


@dataclass
class EditReport:
    """What an edit did and what each stage cost (seconds)."""

    timings: Dict[str, float] = field(default_factory=dict)
    target_nll: List[float] = field(default_factory=list)
    target_steps: List[int] = field(default_factory=list)
    layer_change_norm: Dict[int, float] = field(default_factory=dict)
    retain_count: int = 0
    # the fluency guard's figures (FluencyCheck.as_dict: ppl_before, ppl_after, increase, ...); empty when off
    fluency: Dict[str, Any] = field(default_factory=dict)
    # request indices whose final target loss is far above v_early_stop_loss (targets.FAR_ABOVE_STOP_FACTOR)
    unreached_targets: List[int] = field(default_factory=list)
    # request indices whose answer the edited model still gives (greedy; requests with an answer): not forgotten
    still_answered: List[int] = field(default_factory=list)
    # every timed block in order: (stage, start, end) in ``time.perf_counter`` seconds (per-stage memory in benches)
    stage_spans: List[Tuple[str, float, float]] = field(default_factory=list, repr=False)


@contextlib.contextmanager
def _timer(report: EditReport, stage: str):
    """Add the block's seconds to ``report.timings[stage]`` and its span to ``report.stage_spans`` (also when it
    raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        end = time.perf_counter()
        report.timings[stage] = report.timings.get(stage, 0.0) + end - start
        report.stage_spans.append((stage, start, end))


Requests = Union[Sequence[Mapping[str, Any]], CheckedRequests]
"""An edit's requests as its callers give them: request dicts, or requests checked once where they were read
(:func:`~zerounlearn_editor.engine.requests.check_requests`)."""


@dataclass(frozen=True)
class EditPlan:
    """An edit's checked inputs (:func:`check_edit_inputs`), the one request collection the edit's stages take, so
    the checks run once per edit: the ``forget`` and ``keep`` (retain) requests, each forget request's
    ``target_ids``, the ``hparams`` and the ``retain`` argument ``keep`` was resolved from."""

    forget: List[ForgetRequest]
    keep: List[ForgetRequest]
    target_ids: List[List[int]]
    hparams: EditHyperParams
    retain: RetainSpec = None


def _checked_forget(model: nn.Module, tok, requests: Requests,
                    hparams: EditHyperParams) -> Tuple[List[ForgetRequest], List[List[int]]]:
    """The hparams, the model, the forget requests (with answer-suppression targets one answer per prompt) and
    the edited modules checked: ``(forget requests, their target ids)``."""
    hparams.check()
    # a model whose weights were never loaded: parameters or buffers on the ``meta`` device
    meta = [name for name, tensor in list(model.named_parameters()) + list(model.named_buffers()) if tensor.is_meta]
    if meta:
        shown = ", ".join(meta[:3]) + (f" (+{len(meta) - 3} more)" if len(meta) > 3 else "")
        raise ValueError(
            f"the model has {len(meta)} tensor(s) on the meta device ({shown}): its weights were never loaded "
            f"(e.g. built under init_empty_weights / device='meta'); load the real weights before editing"
        )
    distinct = hparams.target_objective == "suppress_answer"
    if isinstance(requests, CheckedRequests):  # checked where they were read
        if distinct and not requests.distinct_answers:
            raise RequestError("these requests were checked without one answer per prompt, which answer-suppression "
                               "targets need; pass the request dicts instead")
        forget = list(requests.requests)
    else:
        forget = normalize_requests(requests, distinct_answers=distinct)
    check_edited_modules(model, hparams.layers, hparams.rewrite_module_tmp)
    check_layers(model, hparams.layers, hparams.layer_module_tmp)
    get_module(model, hparams.ln_f_module)
    get_module(model, hparams.lm_head_module)
    loss_layer_module(model, hparams.v_loss_layer, hparams.layer_module_tmp)  # in range, before any heavy work
    if hparams.rank_below_alternatives:  # answers exist, before any heavy work; say which requests get no term
        lonely = requests_without_alternatives(forget, alternative_pools(tok, forget))
        if lonely:
            LOG.warning("rank_below_alternatives: request(s) %s have no other request in the edit whose answer starts "
                        "with another token, so the answer-ranking term does not act on them (%d request(s) in the "
                        "edit; it ranks an answer below the other requests' answers)", lonely, len(forget))
    return forget, request_target_ids(tok, forget, hparams)


def request_target_ids(tok, forget: Sequence[ForgetRequest], hparams: EditHyperParams) -> List[List[int]]:
    """The token ids each request's residual is optimised on: the request's ``target`` or the YAML's
    ``neutral_target`` (EOS by default); with ``suppress_answer`` the request's own answer (required)."""
    if hparams.target_objective == "suppress_answer":
        missing = [r.index for r in forget if r.answer is None]
        if missing:
            raise ValueError(
                f"target_objective 'suppress_answer' needs each request's 'ground_truth' (the answer to push "
                f"down); request(s) {missing} have none"
            )
        ids = [target_token_ids(tok, r.answer) for r in forget]
        special = set(getattr(tok, "all_special_ids", []) or [])
        bad = [r.index for r, row in zip(forget, ids) if any(t in special for t in row)]
        if bad:
            raise ValueError(
                f"target_objective 'suppress_answer': the 'ground_truth' of request(s) {bad} is or contains a special "
                f"token (EasyEdit fills in '<|endoftext|>' when no answer is given); give each request its real answer"
            )
        return ids
    check_targets_not_answers(forget, hparams.neutral_target, set(getattr(tok, "all_special_tokens", []) or []))
    return [target_token_ids(tok, r.target or hparams.neutral_target) for r in forget]


def _target_config(model: nn.Module, hparams: EditHyperParams) -> TargetConfig:
    return TargetConfig(
        layer_module=hparams.layer_module_tmp.format(hparams.layers[-1]),
        ln_f_module=hparams.ln_f_module,
        lm_head_module=hparams.lm_head_module,
        loss_layer_module=loss_layer_module(model, hparams.v_loss_layer, hparams.layer_module_tmp),
        fact_token=hparams.fact_token,
        steps=hparams.v_num_grad_steps,
        lr=hparams.v_lr,
        weight_decay=hparams.v_weight_decay,
        clamp_norm_factor=hparams.clamp_norm_factor,
        kl_factor=hparams.kl_factor,
        early_stop_loss=hparams.v_early_stop_loss,
        chunk_size=hparams.chunk_size,
        optimizer=hparams.targets_optimizer,
        objective=hparams.target_objective,
        step_rank_limit=hparams.suppress_rank_limit,
        **_rank_config(hparams),
    )


def _rank_config(hparams: EditHyperParams) -> Dict[str, Any]:
    """The :class:`TargetConfig` fields of ``rank_below_alternatives`` (none when it is not set)."""
    rank = hparams.rank_below_alternatives
    if not rank:
        return {}
    return {"rank_weight": float(rank["weight"]), "rank_margin": float(rank["margin"]), "rank_k": int(rank["k"])}


def as_edit_plan(model: nn.Module, tok, requests: Union[Requests, EditPlan], hparams: EditHyperParams,
                 retain: RetainSpec = None) -> EditPlan:
    """The edit's boundary: a plan as it is (made for ``hparams`` and, when given, ``retain``), requests checked
    into their plan by :func:`check_edit_inputs`. Every entry point (the apply functions, :func:`run_layerwise_edit`)
    converts here, once; the stages behind it take the :class:`EditPlan` alone."""
    if not isinstance(requests, EditPlan):
        return check_edit_inputs(model, tok, requests, hparams, retain)
    if requests.hparams is not hparams:
        raise ValueError("this EditPlan was checked against other hparams; pass the requests instead")
    if retain is not None and retain != requests.retain:
        raise ValueError("this EditPlan was checked with another retain set; pass the requests instead")
    return requests


def check_edit_inputs(
    model: nn.Module, tok, requests: Union[Requests, EditPlan], hparams: EditHyperParams,
    retain: RetainSpec = None,
) -> EditPlan:
    """Every check an edit makes before any work, giving its :class:`EditPlan` (a plan is returned as it is:
    :func:`as_edit_plan`).

    The hparams' current values (:meth:`~zerounlearn_editor.engine.hparams.BaseHyperParams.check`), a loaded
    model, the requests, the retain set (disjoint from the forget prompts), the edited modules and the prompt
    lengths. Nothing is changed; a caller can run it before its own heavy work and pass the plan to the edit.
    """
    if isinstance(requests, EditPlan):
        return as_edit_plan(model, tok, requests, hparams, retain)
    forget, target_ids = _checked_forget(model, tok, requests, hparams)
    keep = resolve_retain(retain, hparams.retain_file)  # checked against the hparams' retain weights
    weights = hparams.retain_weights()
    active = sorted(key for key, value in weights.items() if value > 0)
    if keep and not active:
        raise ValueError(
            f"a retain set of {len(keep)} facts was given, but the {hparams.alg_name} hparams' retain weights "
            f"{sorted(weights)} (the terms that use a retain set) are all 0, so it would be ignored; set one of them > "
            "0 "
            f"(e.g. hparams/ZeroUnlearn-GD/<model>-retain.yaml)"
        )
    if active and not keep:
        LOG.warning(
            "%s: %s set but no retain set was given; those terms have no effect on this edit", hparams.alg_name,
            ", ".join(active),
        )
    check_retain_disjoint(forget, keep)
    check_fewshot_facts(forget, hparams.fewshot_contexts)  # every model, before any work
    _check_lengths(model, tok, forget, keep, target_ids, hparams)
    return EditPlan(forget, keep, target_ids, hparams, retain)


def run_layerwise_edit(
    model: nn.Module,
    tok,
    requests: Union[Requests, EditPlan],
    hparams: EditHyperParams,
    solver: LayerSolver,
    corpus: Optional[str] = None,
    second_moments: Optional[Dict[int, SecondMoment]] = None,
    progress: bool = True,
    targets: Optional[NeutralTargets] = None,
    stages: Optional[EditStages] = None,
    retain: RetainSpec = None,
    fluency_guard: Optional[str] = None,
    fluency_text: Optional[str] = None,
    answer_check: bool = True,
) -> Tuple[Dict[str, torch.Tensor], EditReport]:
    """Edit ``model`` in place; returns (original weights by parameter name, report).

    ``requests``: request dicts, or their :class:`EditPlan` from :func:`check_edit_inputs` (not checked
    again: :func:`as_edit_plan`). ``retain`` (request dicts or a file; else the YAML's ``retain_file``): its keys
    reach the solve as ``LayerProblem.K_r``. ``corpus`` overrides ``hparams.mom2_dataset``; ``second_moments``
    (``{layer: SecondMoment}``) and ``targets`` (from :func:`neutral_targets` with the same settings) skip their stages;
    ``stages`` replaces the statistics / target / key computations. ``fluency_guard`` (``"refuse"``,
    ``"warn"``, ``"off"``) overrides the YAML's guard mode; ``fluency_text`` the built-in text. A refused edit
    raises :class:`~zerounlearn_editor.engine.fluency_guard.FluencyError`, the weights restored.
    ``answer_check`` (default on) scores the requests with an answer after the edit, filling
    ``report.still_answered`` and warning when any is still answered (one forward pass of the prompts; the
    speed bench turns it off to time the method alone).
    """
    mode = resolve_mode(hparams.fluency_max_increase, fluency_guard)
    with progress_scope(progress), eval_mode(model):  # keys and targets without dropout; caller's mode restored
        return _run_layerwise_edit(model, tok, requests, hparams, solver, corpus, second_moments, progress, targets,
                                   stages, retain, (mode, fluency_text), answer_check)


def _run_layerwise_edit(
    model,
    tok,
    requests,
    hparams,
    solver,
    corpus,
    second_moments,
    progress,
    targets,
    stages,
    retain,
    guard=("off", None),
    answer_check: bool = True,
):
    stages = stages or EditStages()
    report = EditReport()
    with _timer(report, "validate"):
        plan = as_edit_plan(model, tok, requests, hparams, retain)  # the boundary: every stage below takes the plan
        forget, keep, target_ids = plan.forget, plan.keep, plan.target_ids
        post_maps = detect_post_mlp_maps(model, hparams.layer_module_tmp, hparams.rewrite_module_tmp, hparams.layers)
    report.retain_count = len(keep)
    LOG.info("%s: unlearning %d fact(s) at layers %s%s", hparams.alg_name, len(forget), list(hparams.layers),
             f" with {len(keep)} retain fact(s)" if keep else "")
    with _timer(report, "statistics"):
        if second_moments is None:
            second_moments = stages.statistics(model, tok, hparams, corpus or hparams.mom2_dataset, progress)
        missing = [l for l in hparams.layers if l not in second_moments]
        if missing:
            raise ValueError(f"second moments missing for layer(s) {missing}")
    with _timer(report, "contexts"):
        prefixes = _edit_prefixes(model, tok, forget, hparams)
    with _timer(report, "targets"):
        if targets is None:
            targets = stages.targets(model, tok, forget, target_ids, prefixes, _target_config(model, hparams))
        elif targets.z.shape[0] != len(forget):
            raise ValueError(f"precomputed targets are for {targets.z.shape[0]} requests, got {len(forget)} requests")
    report.target_nll = targets.nll.tolist()
    report.target_steps = list(targets.steps_run)
    _warn_unreached_targets(forget, targets, hparams, report)

    weights_copy: Dict[str, torch.Tensor] = {}
    for layer in hparams.layers:
        name = hparams.rewrite_module_tmp.format(layer)
        weights_copy[parameter_name_of_weight(model, name)] = get_module(model, name).weight.detach().clone()
    mode, guard_source = guard
    if mode != "off":
        with _timer(report, "fluency"):
            guard_text_ = guard_source if guard_source is not None else builtin_guard_text()
            limit = max_positions(model)  # GPT-2's n_positions; rotary models have none
            chunks = guard_chunks(tok, guard_text_, GUARD_WINDOW if limit is None else min(GUARD_WINDOW, limit))
            n_tokens = sum(len(chunk) for chunk in chunks)
            ppl_before = guard_perplexity(model, tok, chunks)
    try:
        _edit_layers(model, tok, plan, prefixes, targets, second_moments, solver, report, stages.keys, post_maps)
        if mode != "off":
            with _timer(report, "fluency"):
                ppl_after = guard_perplexity(model, tok, chunks)
            judge_edit_fluency(hparams, report, mode, ppl_before, ppl_after, n_tokens)
    except BaseException:
        restore_weights(model, weights_copy)
        raise
    if answer_check:
        with _timer(report, "answered"):
            report.still_answered = still_answered(model, tok, forget)
    _warn_still_answered(forget, hparams, report)
    return weights_copy, report


def judge_edit_fluency(hparams: EditHyperParams, report: EditReport, mode: str, ppl_before: float,
                        ppl_after: float, n_tokens: int) -> None:
    """The fluency guard's verdict on an edit: fills ``report.fluency``; raises :class:`FluencyError` for a
    refused edit (the caller restores the weights), warns for one kept above the limit or above +5%."""
    check = judge_fluency(
        ppl_before,
        ppl_after,
        n_tokens,
        DEFAULT_MAX_INCREASE if hparams.fluency_max_increase is None else hparams.fluency_max_increase,
        mode,
    )
    report.fluency = check.as_dict()
    if not check.passed and mode == "refuse":
        raise FluencyError(f"{hparams.alg_name}: edit refused and the weights restored: {check.message()}", check)
    if not check.passed:
        LOG.warning("%s: %s; kept because fluency_guard is 'warn'", hparams.alg_name, check.message())
    elif check.warned:
        LOG.warning("%s: %s", hparams.alg_name, check.warning())
    else:
        LOG.info("fluency guard: perplexity %.3f -> %.3f (%+.1f%%) on %d tokens", ppl_before, ppl_after,
                 100 * check.increase, n_tokens)


def _warn_still_answered(forget: List[ForgetRequest], hparams: EditHyperParams, report: EditReport) -> None:
    """Warn, naming up to five, about the requests ``report.still_answered`` lists (their answer survived the edit)."""
    if not report.still_answered:
        return
    by_index = {r.index: r for r in forget}
    shown = ", ".join(f"request {i} ({by_index[i].prompt[:60]!r} -> {by_index[i].answer!r})"
                      for i in report.still_answered[:5])
    more = f" (+{len(report.still_answered) - 5} more)" if len(report.still_answered) > 5 else ""
    LOG.warning("%s: %d of %d request(s) with an answer still give it after the edit (greedy): %s%s",
                hparams.alg_name, len(report.still_answered), sum(r.answer is not None for r in forget), shown, more)


AnswerReading = List[Tuple[ForgetRequest, List[int], List[int]]]
"""Per scored request: the request, the model's argmax ids ``[T]`` at its ``T`` answer positions (teacher-forced)
and the answer's ids ``[T]`` (:func:`read_answers`)."""


def read_answers(model: nn.Module, tok, forget: Sequence[ForgetRequest]) -> AnswerReading:
    """One batched teacher-forced pass over the requests with an answer (:data:`AnswerReading`). Requests without
    an answer, or whose answer is a special token (EasyEdit's filled-in EOS), are not scored."""
    from zerounlearn_editor.data.types import Probe
    from zerounlearn_editor.evaluation.batching import encode_probe
    from zerounlearn_editor.evaluation.metrics import answer_argmax_ids

    special = set(getattr(tok, "all_special_tokens", []) or [])
    scored = [r for r in forget if r.answer is not None and r.answer.strip() and r.answer.strip() not in special]
    if not scored:
        return []
    probes = [Probe(r.prompt, r.answer) for r in scored]
    with eval_mode(model), torch.no_grad():
        predicted = answer_argmax_ids(model, tok, probes)
    answers = [encode_probe(tok, p) for p in probes]
    return [(r, ids, list(a.input_ids[a.answer_start:])) for r, ids, a in zip(scored, predicted, answers)]


def still_answered(model: nn.Module, tok, forget: Sequence[ForgetRequest],
                   reading: Optional[AnswerReading] = None) -> List[int]:
    """Indices of the requests whose answer the model still gives: every answer token is the argmax after the
    prompt and the answer's earlier tokens (what greedy decoding produces); ``reading``: :func:`read_answers` of
    this model, if already made."""
    reading = read_answers(model, tok, forget) if reading is None else reading
    return [r.index for r, predicted, answer in reading if predicted == answer]


def _warn_unreached_targets(forget: List[ForgetRequest], targets: NeutralTargets, hparams: EditHyperParams,
                            report: EditReport) -> None:
    """Record in ``report.unreached_targets`` (and warn about) the requests whose final target loss is far above
    ``v_early_stop_loss`` (:data:`~zerounlearn_editor.engine.targets.FAR_ABOVE_STOP_FACTOR`): their edit moves
    the fact's state toward a target that does not yet give the neutral answer."""
    far = far_above_stop(targets.nll, hparams.v_early_stop_loss)
    report.unreached_targets = [forget[i].index for i in far]
    if far:
        shown = ", ".join(f"request {forget[i].index} ({float(targets.nll[i]):.2f} after {targets.steps_run[i]} steps)"
                          for i in far[:5]) + (f" (+{len(far) - 5} more)" if len(far) > 5 else "")
        LOG.warning(
            "%s: the target loss of %d of %d request(s) ended far above the stop value v_early_stop_loss = %g: %s; "
            "the edit may leave these facts answered. Raise v_num_grad_steps (now %d) or v_lr (now %g) ('far': above "
            "max(10 x v_early_stop_loss, ln 10))", hparams.alg_name, len(far), len(forget), hparams.v_early_stop_loss,
            shown, hparams.v_num_grad_steps, hparams.v_lr,
        )


def _check_lengths(
    model: nn.Module, tok, forget: List[ForgetRequest], keep: List[ForgetRequest], target_ids, hparams: EditHyperParams
) -> None:
    """Prompts (with a context prefix and the target) fit the model's position embeddings (GPT-2: ``n_positions``)."""
    limit = max_positions(model)
    if limit is None:
        return
    extra = hparams.context_template_length + 1 if hparams.context_template_count else 0
    fewshot = fewshot_prefixes(forget, hparams.fewshot_contexts)
    extra = max([extra] + [len(tok(prefix)["input_ids"]) for prefix in fewshot])
    for kind, requests in (("request", forget), ("retain request", keep)):
        for i, request in enumerate(requests):
            length = len(tok(request.prompt)["input_ids"]) + extra + (len(target_ids[i]) if kind == "request" else 0)
            if length > limit:
                raise RequestError(
                    f"{kind} {request.index}: prompt {request.prompt[:60]!r}... needs {length} positions (with a "
                    "context "
                    f"prefix of {extra} and the target), more than the model's {limit}"
                )


def neutral_targets(
    model: nn.Module, tok, requests: Requests, hparams: EditHyperParams,
    retain: RetainSpec = None,
) -> NeutralTargets:
    """The target states ``z`` a :func:`run_layerwise_edit` call would optimise (model unchanged).
    ``retain`` plays no part; it is accepted so that callers can pass the edit's arguments."""
    forget, target_ids = _checked_forget(model, tok, requests, hparams)
    with eval_mode(model):
        prefixes = _edit_prefixes(model, tok, forget, hparams)
        return optimise_neutral_targets(model, tok, forget, target_ids, prefixes, _target_config(model, hparams))


def _edit_prefixes(model: nn.Module, tok, forget: List[ForgetRequest], hparams: EditHyperParams) -> List[str]:
    """The context prefixes of an edit: ``""``, the sampled ones and the few-shot ones (``fewshot_contexts``)."""
    count, length = hparams.context_template_count, hparams.context_template_length
    prefixes = context_prefixes(model, tok, count, length, CONTEXT_SEED)
    return prefixes + fewshot_prefixes(forget, hparams.fewshot_contexts)


def target_settings(model: nn.Module, hparams: EditHyperParams) -> Dict[str, Any]:
    """Every setting the neutral targets depend on besides the model and the requests: equal settings give
    equal :func:`neutral_targets` (the bench optimises the targets once for YAMLs differing in solves)."""
    config = dataclasses.asdict(_target_config(model, hparams))
    config.pop("chunk_size")  # chunking does not change the result
    if config["objective"] == "neutral":  # the paper's objective: cache keys as before the key existed
        config.pop("objective")
    if not config["rank_weight"]:  # no rank term: cache keys as before the experiment existed
        for name in ("rank_weight", "rank_margin", "rank_k"):
            config.pop(name)
    if config["step_rank_limit"] is None:  # every request steps: cache keys as before the experiment existed
        config.pop("step_rank_limit")
    if hparams.fewshot_contexts:  # no few-shot prefixes: cache keys as before the key existed
        config["fewshot_contexts"] = hparams.fewshot_contexts
    return dict(
        config,
        context_template_count=hparams.context_template_count,
        context_template_length=hparams.context_template_length,
        context_seed=CONTEXT_SEED,
        neutral_target=hparams.neutral_target,
    )


def _edit_layers(model: nn.Module, tok, plan: EditPlan, prefixes: List[str], targets: NeutralTargets,
                 second_moments: Dict[int, SecondMoment], solver: LayerSolver, report: EditReport,
                 read_keys: KeysStage, post_maps: Dict[int, PostMlpMap]) -> None:
    """Keys, solve and write-back layer by layer (with ``quantized_forget_keys``, also the forget keys
    of a rounded twin of the model: :mod:`~zerounlearn_editor.engine.quantized_keys`)."""
    hparams, forget, keep = plan.hparams, plan.forget, plan.keep
    hidden_module = hparams.layer_module_tmp.format(hparams.layers[-1])
    context: Dict[str, Any] = {"context_moment": True} if hparams.needs_context_moment() else {}
    replay: Optional[LayerPrefixReplay] = None
    if read_keys is read_keys_and_hidden:
        context["hidden_rows"] = len(forget)  # the retain rows' passes stop at the key: no hidden state is used
    if read_keys is read_keys_and_hidden and len(hparams.layers) > 1:
        # layers before the first edited one never change here: computed on the first read only; each later read
        # starts at the layer edited before it (the replay advances)
        replay = context["prefix_replay"] = LayerPrefixReplay(model, hparams.layer_module_tmp, min(hparams.layers))
    twin = None
    if quantized_keys_setting(hparams):
        with _timer(report, "keys"):
            twin = quantized_twin(model, hparams, replay=read_keys is read_keys_and_hidden)
    bar = progress_bar(total=len(hparams.layers), desc=f"keys and solve, {len(forget)} facts", unit="layer")
    try:
        for position, layer in enumerate(hparams.layers):
            bar.set_postfix(layer=layer, refresh=False)
            key_module = hparams.rewrite_module_tmp.format(layer)
            with _timer(report, "keys"):
                last = position == len(hparams.layers) - 1
                if replay is not None and not last:  # this read also stores layer ``layer - 1``'s output for the next
                    replay.store_next(layer)
                # forget and retain keys in the same batched passes; retain columns come last
                readout = read_keys(model, tok, forget + keep, prefixes, key_module, hidden_module,
                                    hparams.fact_token, hparams.chunk_size, **context)
                if replay is not None:
                    replay.advance()
                twin_readout = None if twin is None else twin.read(
                    read_keys, tok, forget, prefixes, key_module, hidden_module, hparams.fact_token,
                    hparams.chunk_size, layer=None if last else layer)
            if last:  # the last read: free the stored outputs before the solve
                if replay is not None:
                    replay.clear()
                if twin is not None:
                    twin.clear_replay()
            # the read's own frees after its last chunk (the chunks' key lists, the previous layer's readout) leave
            # the heap before the solve's float64 workspace: measured, 218 MB peak at 1,000 facts with this trim,
            # 234 without
            release_free_memory()
            module = get_module(model, key_module)
            _solve_and_write(module, lambda: _layer_problem(plan, layer, position, module, readout, targets,
                                                            second_moments, post_maps, twin, twin_readout),
                             solver, report)
            if twin is not None:
                twin.sync(key_module, module)
            release_free_memory()  # the solve's freed workspace leaves the heap before the next layer's key read
            bar.update(1)
    finally:  # an edit that raised leaves no stored outputs or spill files behind either
        if replay is not None:
            replay.clear()
        if twin is not None:
            twin.close()
    bar.close()


def _layer_problem(plan: EditPlan, layer: int, position: int, module: nn.Module, readout: LayerReadout,
                   targets: NeutralTargets, second_moments: Dict[int, SecondMoment],
                   post_maps: Dict[int, PostMlpMap], twin: Optional[QuantizedTwin] = None,
                   twin_readout: Optional[LayerReadout] = None) -> LayerProblem:
    """One layer's :class:`LayerProblem` from its key read: the residual change ``(z - h) / (layers left)`` mapped
    to values ``M_n``; with a twin, its keys appended to ``K_f`` with the same residual change
    (:func:`~zerounlearn_editor.engine.quantized_keys.with_quantized_columns`)."""
    hparams, n = plan.hparams, len(plan.forget)
    W = get_weight_matrix(module).detach().double()
    device = W.device
    K_f = readout.keys[:, :n].to(device).double()
    K_r = readout.keys[:, n:].to(device).double() if plan.keep else None
    residual = (targets.z - readout.hidden[:n]).to(device).double() / (len(hparams.layers) - position)
    # the value change that moves the residual by ``residual`` (through a post-MLP norm where there is one)
    bias = getattr(module, "bias", None)
    bias = None if bias is None else bias.detach().to(device).double()
    post_map = post_maps.get(layer, IDENTITY)
    M_n = value_targets(W, K_f, residual.t(), post_map, bias)
    if twin is not None and twin_readout is not None:
        K_q = twin_readout.keys[:, :n].to(device).double()
        K_f, M_n = with_quantized_columns(K_f, M_n, K_q, value_targets(W, K_q, residual.t(), post_map, bias),
                                          twin.weight)
    C_ctx = None
    if readout.context_mom2 is not None and readout.context_count:
        C_ctx = readout.context_mom2.to(device) / readout.context_count
    return LayerProblem(layer, W, K_f, M_n, second_moments[layer].moment().to(device), K_r, C_ctx)


def _solve_and_write(module: nn.Module, build: Callable[[], LayerProblem], solver: LayerSolver,
                     report: EditReport) -> None:
    """The layer's problem (``build``), the method's solve of it and the write-back of its ``W'`` into ``module``
    (problem and solve timed as ``solve``)."""
    with _timer(report, "solve"):
        problem = build()
        layer = problem.layer
        new_W = solver(problem)
        if not torch.isfinite(new_W).all():
            raise ValueError(f"layer {layer}: the solve produced non-finite weights")
    # before the write-back: for a float64 weight, ``W`` is the parameter itself
    report.layer_change_norm[layer] = float((new_W - problem.W).norm() / problem.W.norm())
    with _timer(report, "write_back"):
        set_weight_matrix(module, new_W)
    LOG.info("layer %d edited: relative change %.3e", layer, report.layer_change_norm[layer])


def restore_weights(model: nn.Module, weights_copy: Mapping[str, torch.Tensor]) -> None:
    """Copy saved tensors back into the parameters of the same names (bit-identical)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights_copy.items():
            params[name].copy_(value)


EDIT_KWARGS = ("corpus", "second_moments", "progress", "targets", "stages", "retain", "fluency_guard", "fluency_text",
               "answer_check")
"""The keyword arguments of :func:`run_layerwise_edit` that :func:`apply_edit_method` passes on."""


def apply_edit_method(
    model: nn.Module,
    tok,
    requests: Union[Requests, EditPlan],
    hparams: EditHyperParams,
    solver: LayerSolver,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """EasyEdit's calling convention around :func:`run_layerwise_edit`.

    ``copy=True`` (or ``keep_original_weight=True``) edits a deep copy. ``weights_copy`` maps parameter names
    to the original tensors when ``return_orig_weights`` is set (else it is empty). Keyword arguments of
    :func:`run_layerwise_edit` are passed on, ``report`` (an :class:`EditReport`) is filled; others that
    EasyEdit passes (``train_ds``, ...) are ignored.
    """
    # before any copy is made
    requests = as_edit_plan(model, tok, requests, hparams, kwargs.get("retain"))
    resolve_mode(hparams.fluency_max_increase, kwargs.get("fluency_guard"))
    if copy or keep_original_weight:
        model = copy_module.deepcopy(model)
    weights_copy, report = run_layerwise_edit(model, tok, requests, hparams, solver,
                                              **{key: kwargs[key] for key in EDIT_KWARGS if key in kwargs})
    target_report = kwargs.get("report")
    if isinstance(target_report, EditReport):
        timings = target_report.timings
        timings.update(report.timings)
        target_report.__dict__.update(report.__dict__, timings=timings)
    return model, (weights_copy if return_orig_weights else {})
