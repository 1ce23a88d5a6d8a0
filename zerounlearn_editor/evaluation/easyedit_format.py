"""Per-request metric dicts in EasyEdit's layout, and their summary.

EasyEdit's ``BaseEditor.edit`` returns, per request::

    {"case_id": ..., "requested_rewrite": request, "time": seconds,
     "pre":  {"rewrite_acc": [...], "rephrase_acc": [...],
              "locality": {"<key>_output": [[token ids], ...]}, "portability": {}},
     "post": {... same ..., "locality": {"<key>_output": [...], "<key>_acc": [...]}}}

where ``<key>_acc`` (post only) is, per locality prompt, the fraction of answer positions
whose argmax token is the same before and after the edit. This module emits the same layout
for unlearning, with these meanings:

* ``rewrite_acc`` / ``rephrase_acc``: teacher-forced token accuracy of the **true answer
  (ground truth)** on the forget / paraphrase probes. (EasyEdit scores ``target_new``; an
  unlearning request has no meaningful new target, so the interesting number is how much of
  the old answer survives: lower post values mean more forgetting.)
* ``rewrite_prob`` / ``rephrase_prob``: geometric-mean token probability of the true answer.
* ``locality["<key>_output"]``: argmax token ids at the neighbour answers' positions;
  ``locality["<key>_truth_acc"]``: token accuracy of the neighbours' true answers;
  post-only ``locality["<key>_acc"]``: pre/post agreement, as in EasyEdit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

import torch

from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.evaluation.metrics import ProbeScores, evaluate_probes

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CaseScores", "score_case", "phase_metrics", "easyedit_metrics", "summarize_metrics"]


@dataclass(frozen=True)
class CaseScores:
    """Scores of one case's three probe sets at one phase (pre or post unlearning).

    ``groups``: scores of the case's ``probe_groups`` (e.g. RWKU levels), by group name;
    empty for datasets without groups.
    """

    forget: ProbeScores
    paraphrase: ProbeScores
    neighbour: ProbeScores
    groups: Dict[str, ProbeScores] = field(default_factory=dict)


def _split(scores: ProbeScores, sizes: Sequence[int]) -> List[ProbeScores]:
    """Split concatenated per-probe scores into consecutive groups of ``sizes``."""
    parts: List[ProbeScores] = []
    start = 0
    for size in sizes:
        part = {key: values[start : start + size] for key, values in scores.items()}
        parts.append(part)  # type: ignore[arg-type]
        start += size
    return parts


def score_case(
    model: torch.nn.Module, tok: "PreTrainedTokenizerBase", case: UnlearnCase, batch_size: int = 32
) -> CaseScores:
    """Score a case's forget, paraphrase and neighbour probes (batched together)."""
    groups = (case.forget, case.paraphrase, case.neighbour)
    scores = evaluate_probes(model, tok, [p for group in groups for p in group], batch_size)
    forget, paraphrase, neighbour = _split(scores, [len(g) for g in groups])
    return CaseScores(forget=forget, paraphrase=paraphrase, neighbour=neighbour)


def phase_metrics(scores: CaseScores, locality_key: str = "neighborhood") -> Dict[str, Any]:
    """The ``"pre"``/``"post"`` dict of one case (see module docstring for the keys)."""
    return {
        "rewrite_acc": list(scores.forget["acc"]),
        "rewrite_prob": list(scores.forget["prob"]),
        "rephrase_acc": list(scores.paraphrase["acc"]),
        "rephrase_prob": list(scores.paraphrase["prob"]),
        "locality": {
            f"{locality_key}_output": [list(ids) for ids in scores.neighbour["pred_ids"]],
            f"{locality_key}_truth_acc": list(scores.neighbour["acc"]),
        },
        "portability": {},
    }


def _agreement(pre: Sequence[Sequence[int]], post: Sequence[Sequence[int]]) -> List[float]:
    """Per probe, the fraction of positions where pre and post argmax tokens agree."""
    if len(pre) != len(post):
        raise ValueError(f"locality output count mismatch: {len(pre)} pre, {len(post)} post")
    out = []
    for a, b in zip(pre, post):
        if len(a) != len(b):
            raise ValueError("pre and post locality outputs differ in length")
        out.append(sum(x == y for x, y in zip(a, b)) / len(a))
    return out


def easyedit_metrics(
    case_id: Any,
    request: Mapping[str, Any],
    pre: CaseScores,
    post: Optional[CaseScores] = None,
    time: Optional[float] = None,
    locality_key: str = "neighborhood",
) -> Dict[str, Any]:
    """One request's metrics in EasyEdit's layout (``post`` and ``time`` optional).

    With ``post``, ``post["locality"]["<key>_acc"]`` holds the pre/post agreement of the
    neighbour predictions, as EasyEdit's ``finalize_locality_metrics`` computes it.
    """
    result: Dict[str, Any] = {
        "case_id": case_id,
        "requested_rewrite": dict(request),
        "pre": phase_metrics(pre, locality_key),
    }
    if time is not None:
        result["time"] = time
    if post is not None:
        result["post"] = phase_metrics(post, locality_key)
        result["post"]["locality"][f"{locality_key}_acc"] = _agreement(
            pre.neighbour["pred_ids"], post.neighbour["pred_ids"]
        )
    return result


def summarize_metrics(all_metrics: Sequence[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Means over requests, as EasyEdit's summary: each request's list is averaged first.

    Returns ``{"pre": {...}, "post": {...}}`` with the ``*_acc``/``*_prob`` keys and, under
    ``"locality"``, the ``*_acc`` keys that every phase holds; keys with no values are left out.
    """
    summary: Dict[str, Dict[str, Any]] = {}
    for phase in ("pre", "post"):
        phase_dicts = [m[phase] for m in all_metrics if phase in m]
        if not phase_dicts:
            continue
        out: Dict[str, Any] = {}
        for key in ("rewrite_acc", "rewrite_prob", "rephrase_acc", "rephrase_prob"):
            means = [fmean(d[key]) for d in phase_dicts if d.get(key)]
            if means:
                out[key] = fmean(means)
        locality: Dict[str, float] = {}
        loc_keys = sorted({k for d in phase_dicts for k in d.get("locality", {}) if k.endswith("acc")})
        for key in loc_keys:
            means = [fmean(d["locality"][key]) for d in phase_dicts if d.get("locality", {}).get(key)]
            if means:
                locality[key] = fmean(means)
        if locality:
            out["locality"] = locality
        summary[phase] = out
    return summary
