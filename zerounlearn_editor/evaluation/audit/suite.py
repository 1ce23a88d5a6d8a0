"""Score one model on an :class:`~.plan.AuditPlan`: recovered % per probe.

A fact is **recovered** by a probe when, for at least one of that probe's prompts, the answer's
first token is the model's greedy (argmax) next token after the prompt: the project's
``first_acc`` (:func:`~zerounlearn_editor.evaluation.metrics.evaluate_probes`), scored in the
same batched pass. The % is over **all** forgotten facts (a fact the probe has no prompt for
counts as not recovered, so the unedited row shows what the probe itself can reach). Exceptions:

* multiple choice: recovered when the true answer's log-probability after the prompt (the sum
  over its tokens, teacher-forced) is strictly above every distractor's;
* logit lens: recovered when the answer's first token's best rank over the layers from the first
  edited one on is < ``top_k`` (the top-10 rate); the JSON also has each fact's best rank;
* quantization ``<scheme>:<probe>``: the probe on an RTN-quantized copy (:mod:`.quantize`);
* relearning ``relearn-<scope>`` / ``generic-<scope>``: the bare prompt after fine-tuning a copy
  on related facts / generic text (:mod:`.relearn`);
* ``rtt-<scope>``: the bare prompt of the held-out half of the forgotten facts after fine-tuning a copy on the
  other half (their prompts and true answers; :attr:`~.plan.AuditPlan.rtt_trained`). Its % and ``items`` are over
  the held-out facts only (``n`` = their count; ``"held_out"``: their case ids).

Each result: ``{"recovered": %, "n": facts, "n_probed": facts with a prompt, "items": [0/1 per fact]}``
(+ ``"prompt_rate"``: % of all the probe's prompts, + ``"best_ranks"`` for the lens, + ``"same_relation"``
for the borrowing probes: facts that got same-relation material, :attr:`~.plan.AuditPlan.same_relation`).

A scored model, or a quantized / fine-tuned copy, with a non-finite weight is an :class:`~.plan.AuditError`
(its greedy tokens mean nothing and would read as 0 % recovered). A probe whose unedited row recovers at
most :data:`UNINFORMATIVE_MAX` % is flagged by :func:`uninformative`.
"""
from __future__ import annotations

import logging
import math
import statistics
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.audit.lens import best_ranks
from zerounlearn_editor.evaluation.audit.plan import AuditError, AuditPlan, AuditSettings
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES, quantized_copy
from zerounlearn_editor.evaluation.audit.relearn import relearned_copy
from zerounlearn_editor.evaluation.metrics import evaluate_probes

LOG = logging.getLogger(__name__)


class LensConfig:
    """Where the lens reads: the first edited layer and the model's module templates."""

    def __init__(self, first_layer: int, layer_module_tmp: str, ln_f_module: str):
        self.first_layer, self.layer_module_tmp, self.ln_f_module = first_layer, layer_module_tmp, ln_f_module


def _lens_sources(plan: AuditPlan) -> List[str]:
    return ["prompt", "paraphrase", f"ic{plan.lens_shots}"]


def probe_columns(plan: AuditPlan, settings: AuditSettings) -> List[str]:
    """The probe names :func:`score_model` fills, in table order."""
    fam, cols = settings.families, []
    if "formats" in fam:
        cols += [c for c in ("prompt", "paraphrase", "question", "chat") if c in plan.text_probes]
    if "in_context" in fam:
        cols += [f"ic{k}" for k in plan.shots]
    if "choice" in fam:
        cols.append("mc")
    if "lens" in fam:
        cols += [f"lens:{s}" for s in _lens_sources(plan)]
    if "quantization" in fam:
        cols += [f"{q}:{s}" for q in settings.quant_schemes for s in _lens_sources(plan)]
    if "relearning" in fam:
        cols += [f"{kind}-{scope}" for kind in ("relearn", "generic") for scope in settings.relearn_scopes]
    if "rtt" in fam and plan.rtt_held_out:
        cols += [f"rtt-{scope}" for scope in settings.relearn_scopes]
    if "rwku" in fam:
        cols += [c for c in plan.text_probes if c.startswith("rwku_")]
    return cols


UNINFORMATIVE_MAX = 5.0
"""A probe whose unedited (base) row recovers at most this % of the facts is flagged uninformative: it cannot
show forgetting, since it does not even reach the facts the model knows."""


def uninformative(base: Dict[str, Dict[str, Any]]) -> List[str]:
    """The probes of the unedited model's results ``base`` (``{probe: {"recovered": %, ...}}``) recovering
    ``<= UNINFORMATIVE_MAX`` % (``"/kept"`` columns are not probes of their own and are skipped)."""
    return [name for name, r in base.items() if not name.endswith("/kept") and r.get("recovered") is not None
            and r["recovered"] <= UNINFORMATIVE_MAX]


def non_finite_parameters(model: nn.Module) -> List[str]:
    """Names of ``model``'s parameters holding a NaN or an infinity."""
    return [name for name, param in model.named_parameters() if not bool(torch.isfinite(param).all())]


def check_finite(model: nn.Module, what: str, fix: str) -> None:
    """:class:`AuditError` when ``model`` has a non-finite parameter: such a model's greedy token is
    meaningless, and scoring it would read as 0 % recovered (perfect forgetting)."""
    bad = non_finite_parameters(model)
    if bad:
        shown = ", ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
        raise AuditError(f"audit: {what} has non-finite weights ({shown}), so its probe cannot be scored; {fix}")


def _result(flags: Sequence[bool], n_probed: int, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    n = len(flags)
    return {"recovered": 100.0 * sum(flags) / n if n else None, "n": n, "n_probed": n_probed,
            "items": [int(f) for f in flags], **(extra or {})}


def _text_results(
    model: nn.Module, tok: Any, groups: Dict[str, List[List[Probe]]], batch_size: int
) -> Dict[str, Dict[str, Any]]:
    """Recovered per text probe, every probe of every group in one batched pass."""
    flat: List[Probe] = []
    spans: Dict[str, List[range]] = {}
    for name, per_item in groups.items():
        spans[name] = []
        for probes in per_item:
            spans[name].append(range(len(flat), len(flat) + len(probes)))
            flat.extend(probes)
    first = evaluate_probes(model, tok, flat, batch_size)["first_acc"] if flat else []
    out = {}
    for name, ranges in spans.items():
        flags = [any(first[j] == 1.0 for j in r) for r in ranges]
        total = sum(len(r) for r in ranges)
        rate = 100.0 * sum(first[j] for r in ranges for j in r) / total if total else None
        out[name] = _result(flags, sum(1 for r in ranges if len(r)), {"prompt_rate": rate})
    return out


def _choice_result(model: nn.Module, tok: Any, plan: AuditPlan, batch_size: int) -> Dict[str, Any]:
    probes = [
        Probe(item.prompt, option) for item, options in zip(plan.items, plan.choice_options) for option in options
    ]
    scores = evaluate_probes(model, tok, probes, batch_size)
    flags, at = [], 0
    for options in plan.choice_options:
        logps = [n * math.log(p) if p > 0 else -math.inf
                 for p, n in zip(scores["prob"][at:at + len(options)], scores["n_tokens"][at:at + len(options)])]
        at += len(options)
        flags.append(len(options) > 1 and all(logps[0] > other for other in logps[1:]))
    return _result(flags, sum(1 for o in plan.choice_options if len(o) > 1),
                   {"options": [len(o) for o in plan.choice_options]})


def _lens_results(model, tok, plan: AuditPlan, settings: AuditSettings, lens: LensConfig) -> Dict[str, Dict[str, Any]]:
    out = {}
    for source in _lens_sources(plan):
        per_item = plan.text_probes.get(source, [[] for _ in plan.items])
        flat = [p for probes in per_item for p in probes]
        ranks = best_ranks(
            model, tok, flat, lens.first_layer, lens.layer_module_tmp, lens.ln_f_module, settings.batch_size
        )
        best, at = [], 0
        for probes in per_item:
            best.append(min(ranks[at:at + len(probes)]) if probes else None)
            at += len(probes)
        flags = [r is not None and r < settings.top_k for r in best]
        known = [r for r in best if r is not None]
        out[f"lens:{source}"] = _result(flags, len(known), {
            "best_ranks": best, "median_best_rank": statistics.median(known) if known else None})
    return out


def _relearned_prompt(model: nn.Module, tok: Any, name: str, scope: str, settings: AuditSettings,
                      probes: List[List[Probe]], **data: Any) -> Dict[str, Any]:
    """The ``probes`` (per fact) on a copy of ``model`` fine-tuned on ``data`` (:func:`.relearn.relearned_copy`)."""
    LOG.info("audit: %d fine-tuning steps (%s)", settings.relearn_steps, name)
    twin = relearned_copy(model, tok, scope, settings.relearn_steps, settings.relearn_lr, **data)
    check_finite(twin, f"the {name} copy after {settings.relearn_steps} Adam steps at learning "
                 f"rate {settings.relearn_lr:g}", "lower --relearn-lr (default 1e-4) or --relearn-steps")
    result = _text_results(twin, tok, {"prompt": probes}, settings.batch_size)["prompt"]
    del twin
    return result


def _relearning_results(model: nn.Module, tok: Any, plan: AuditPlan,
                        settings: AuditSettings) -> Dict[str, Dict[str, Any]]:
    """``relearn-S`` / ``generic-S`` (family ``relearning``) and ``rtt-S`` (family ``rtt``) for every scope S."""
    results: Dict[str, Dict[str, Any]] = {}
    if "relearning" in settings.families:
        for kind in ("relearn", "generic"):
            data = dict(pairs=plan.relearn_pairs) if kind == "relearn" else dict(texts=plan.generic)
            for scope in settings.relearn_scopes:
                results[f"{kind}-{scope}"] = _relearned_prompt(
                    model, tok, f"{kind}-{scope}", scope, settings, plan.text_probes["prompt"], **data)
    if "rtt" in settings.families and plan.rtt_held_out:
        trained = [(plan.items[i].prompt, plan.items[i].answer) for i in plan.rtt_trained]
        held_out = [plan.text_probes["prompt"][i] for i in plan.rtt_held_out]
        for scope in settings.relearn_scopes:
            result = _relearned_prompt(model, tok, f"rtt-{scope}", scope, settings, held_out, pairs=trained)
            results[f"rtt-{scope}"] = {**result, "held_out": [plan.items[i].case_id for i in plan.rtt_held_out]}
    return results


def score_model(model: nn.Module, tok: Any, plan: AuditPlan, settings: AuditSettings,
                lens: Optional[LensConfig] = None) -> Dict[str, Dict[str, Any]]:
    """Every probe of ``settings.families`` on ``model`` (unchanged; copies are quantized / fine-tuned)."""
    fam = settings.families
    check_finite(model, "the scored model", "check the edit (or the loaded checkpoint) before auditing it")
    results: Dict[str, Dict[str, Any]] = {}
    wanted = [c for c in probe_columns(plan, settings) if c in plan.text_probes]
    results.update(_text_results(model, tok, {c: plan.text_probes[c] for c in wanted}, settings.batch_size))
    if "choice" in fam:
        results["mc"] = _choice_result(model, tok, plan, settings.batch_size)
    if "lens" in fam:
        if lens is None:
            raise ValueError("audit: the logit lens needs the first edited layer and the module templates")
        results.update(_lens_results(model, tok, plan, settings, lens))
    if "quantization" in fam:
        sources = _lens_sources(plan)
        for scheme in settings.quant_schemes:
            LOG.info("audit: %s round-to-nearest copy", scheme)
            twin = quantized_copy(model, QUANT_SCHEMES[scheme])
            check_finite(twin, f"the {scheme} copy", "leave quantization out of --probes for this model")
            scored = _text_results(twin, tok, {s: plan.text_probes[s] for s in sources}, settings.batch_size)
            results.update({f"{scheme}:{s}": v for s, v in scored.items()})
            del twin
    results.update(_relearning_results(model, tok, plan, settings))
    for name, result in results.items():
        key = "relearn" if name.startswith("relearn-") else name
        if key in plan.same_relation:
            result["same_relation"] = plan.same_relation[key]
    return {c: results[c] for c in probe_columns(plan, settings) if c in results}
