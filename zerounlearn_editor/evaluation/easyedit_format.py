"""Per-request metric dicts in EasyEdit's layout (``BaseEditor.edit``'s ``pre``/``post``), for unlearning:

* ``rewrite_acc`` / ``rephrase_acc``: teacher-forced token accuracy of the **true answer** on the
  forget / paraphrase probes (EasyEdit scores ``target_new``; lower post values: more forgetting);
  ``rewrite_prob`` / ``rephrase_prob``: its geometric-mean token probability;
* ``locality``: ``neighborhood_output`` (argmax ids at the neighbour answers' positions),
  ``neighborhood_truth_acc`` (token accuracy of the neighbours' answers) and, post only,
  ``neighborhood_acc`` (per neighbour, the fraction of argmax ids unchanged, as EasyEdit computes it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from zerounlearn_editor.evaluation.metrics import ProbeScores


@dataclass(frozen=True)
class CaseScores:
    """Scores of one case's probe sets at one phase (pre or post); ``groups``: of its ``probe_groups``."""

    forget: ProbeScores
    paraphrase: ProbeScores
    neighbour: ProbeScores
    groups: Dict[str, ProbeScores] = field(default_factory=dict)


def _phase(scores: CaseScores) -> Dict[str, Any]:
    """The ``"pre"``/``"post"`` dict of one case (see module docstring for the keys)."""
    return {
        "rewrite_acc": list(scores.forget["acc"]),
        "rewrite_prob": list(scores.forget["prob"]),
        "rephrase_acc": list(scores.paraphrase["acc"]),
        "rephrase_prob": list(scores.paraphrase["prob"]),
        "locality": {
            "neighborhood_output": [list(ids) for ids in scores.neighbour["pred_ids"]],
            "neighborhood_truth_acc": list(scores.neighbour["acc"]),
        },
        "portability": {},
    }


def easyedit_metrics(case_id: Any, request: Mapping[str, Any], pre: CaseScores,
                     post: Optional[CaseScores] = None, time: Optional[float] = None) -> Dict[str, Any]:
    """One request's metrics in EasyEdit's layout (``post`` and ``time`` optional)."""
    result: Dict[str, Any] = {"case_id": case_id, "requested_rewrite": dict(request), "pre": _phase(pre)}
    if time is not None:
        result["time"] = time
    if post is not None:
        result["post"] = _phase(post)
        before, after = pre.neighbour["pred_ids"], post.neighbour["pred_ids"]
        if [len(a) for a in before] != [len(b) for b in after]:
            raise ValueError(
                f"pre/post locality outputs differ in number or length ({len(before)} / {len(after)})")
        # per probe, the fraction of positions where pre and post argmax tokens agree
        agreement = [sum(x == y for x, y in zip(a, b)) / len(a) for a, b in zip(before, after)]
        result["post"]["locality"]["neighborhood_acc"] = agreement
    return result
