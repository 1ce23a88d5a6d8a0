"""ZeroUnlearn-GD's repair rounds (``repair_rounds: R``; opt-in, 0 = the paper's one edit).

After the edit, the requests whose answer's first token is still the model's argmax after the bare prompt
(:func:`first_token_kept`) are edited again on the edited model, alone, with targets read from that model and the
edit's other inputs (statistics, retain set, guard); up to ``R`` such rounds, stopping early when none is left. Every
round adds ``E P_m`` for its few facts only. The fluency guard judges the whole edit: each round's perplexity
against the unedited model's (a refused total restores the unedited weights, as a refused edit does); the weights
returned to the caller are the unedited ones, and a round that fails restores them too.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.engine.fluency_guard import resolve_mode
from zerounlearn_editor.engine.pipeline import (
    EDIT_KWARGS,
    AnswerReading,
    EditPlan,
    EditReport,
    judge_edit_fluency,
    read_answers,
    restore_weights,
    run_layerwise_edit,
    still_answered,
)
from zerounlearn_editor.engine.requests import ForgetRequest

LOG = logging.getLogger(__name__)

PASSED_ON = tuple(key for key in EDIT_KWARGS if key not in ("targets", "answer_check"))
"""The edit's keyword arguments a repair round takes too (not ``targets``: each round reads its own; the rounds
check the answers themselves)."""


def first_token_kept(model: nn.Module, tok, forget: Sequence[ForgetRequest],
                     reading: Optional[AnswerReading] = None) -> List[int]:
    """Positions in ``forget`` of the requests whose answer's first token is the model's argmax after the prompt
    (teacher-forced, as the bench's first-token accuracy reads it); ``reading``: :func:`read_answers` of this model,
    if already made. Requests without an answer, or whose answer is a special token, are not scored."""
    reading = read_answers(model, tok, forget) if reading is None else reading
    position = {r.index: i for i, r in enumerate(forget)}
    return [position[r.index] for r, predicted, answer in reading if predicted[:1] == answer[:1]]


def run_repair_rounds(model: nn.Module, tok, plan: EditPlan, solver_of: Callable[[], Any], rounds: int,
                      edit_kwargs: Mapping[str, Any], original: Dict[str, torch.Tensor],
                      report: EditReport) -> List[int]:
    """Up to ``rounds`` repair rounds on ``model`` (already edited with ``plan``, ``report`` its report); returns
    the number of requests each round edited. ``solver_of()`` gives a fresh per-layer solve; ``original`` holds the
    unedited weights, put back if a round raises or the guard refuses the total. ``report`` gains
    ``timings["repair"]`` (the rounds with their scoring passes) and its span, the guard's verdict on the total
    (``fluency``) and, unless ``edit_kwargs`` turns ``answer_check`` off, the final model's greedy answers
    (``still_answered``, a warning naming those still given; timed as ``"answered"``). Its other fields (targets,
    layer changes) stay the first edit's."""
    edited: List[int] = []
    kwargs = {key: edit_kwargs[key] for key in PASSED_ON if key in edit_kwargs}
    mode = resolve_mode(plan.hparams.fluency_max_increase, edit_kwargs.get("fluency_guard"))
    start = time.perf_counter()
    reading: Optional[AnswerReading] = None  # of the model as it is now (None once a round has changed it)
    try:
        for round_ in range(1, rounds + 1):
            reading = read_answers(model, tok, plan.forget)
            left = first_token_kept(model, tok, plan.forget, reading)
            if not left:
                break
            reading = None
            LOG.info("%s repair round %d: %d request(s) still start their answer: %s", plan.hparams.alg_name, round_,
                     len(left), ", ".join(str(plan.forget[i].index) for i in left[:10]))
            sub_plan = replace(plan, forget=[plan.forget[i] for i in left],
                               target_ids=[plan.target_ids[i] for i in left])
            _, round_report = run_layerwise_edit(model, tok, sub_plan, plan.hparams, solver_of(),
                                                 answer_check=False, **kwargs)
            edited.append(len(left))
            if report.fluency and round_report.fluency:  # the total against the unedited model
                judge_edit_fluency(plan.hparams, report, mode, report.fluency["ppl_before"],
                                   round_report.fluency["ppl_after"], round_report.fluency["tokens"])
    except BaseException:
        restore_weights(model, original)
        raise
    finally:
        end = time.perf_counter()
        report.timings["repair"] = report.timings.get("repair", 0.0) + end - start
        report.stage_spans.append(("repair", start, end))
    LOG.info("%s: repair rounds edited %s request(s)", plan.hparams.alg_name, edited or "no")
    if edit_kwargs.get("answer_check", True):
        _final_answer_check(model, tok, plan, report, len(edited), reading)
    return edited


def _final_answer_check(model: nn.Module, tok, plan: EditPlan, report: EditReport, rounds_run: int,
                        reading: Optional[AnswerReading]) -> None:
    """``report.still_answered`` of the model the rounds left (from ``reading`` when the last round's check read
    this model), timed as ``"answered"``; a warning names them."""
    start = time.perf_counter()
    left = still_answered(model, tok, plan.forget, reading)
    end = time.perf_counter()
    report.timings["answered"] = report.timings.get("answered", 0.0) + end - start
    report.stage_spans.append(("answered", start, end))
    report.still_answered = left
    if left:
        LOG.warning("%s: %d request(s) still give their answer after %d repair round(s) (greedy): %s",
                    plan.hparams.alg_name, len(left), rounds_run, ", ".join(str(i) for i in left[:10]))
