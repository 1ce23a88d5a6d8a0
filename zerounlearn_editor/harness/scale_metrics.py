"""The scale tables' probe columns: :func:`scale_metrics` of all cases and of the **known subset** (cases whose
forget prompt the unedited model answers at token accuracy >= ``known_min_accuracy``, :func:`known_mask`)."""
from __future__ import annotations

from statistics import fmean
from typing import Any, Dict, List, Sequence

from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.harness.case_scoring import probe_metrics
from zerounlearn_editor.harness.scale_config import KNOWN_MIN_ACCURACY

__all__ = ["PROBE_COLUMNS", "known_mask", "scale_metrics"]


PROBE_COLUMNS = ("eff", "eff_first", "gen", "gen_first", "spe")
"""Probe metrics reported on all cases and on the known subset (``<key>_known``)."""


def known_mask(pre: Sequence[CaseScores], min_accuracy: float = KNOWN_MIN_ACCURACY) -> List[bool]:
    """Per case: the unedited model's mean forget-prompt token accuracy is ``>= min_accuracy``."""
    return [bool(s.forget["acc"]) and fmean(s.forget["acc"]) >= min_accuracy for s in pre]


def scale_metrics(post: Sequence[CaseScores], pre: Sequence[CaseScores], known: Sequence[bool]) -> Dict[str, Any]:
    """:func:`probe_metrics` of all cases plus ``<col>_known`` for :data:`PROBE_COLUMNS` over the known cases.

    ``known_count`` is the number of known cases; without any the ``_known`` columns are absent.
    """
    if not (len(post) == len(pre) == len(known)):
        raise ValueError(f"post ({len(post)}), pre ({len(pre)}) and known ({len(known)}) must have one entry per case")
    out: Dict[str, Any] = dict(probe_metrics(post, pre))
    keep = [i for i, k in enumerate(known) if k]
    out["known_count"] = len(keep)
    if keep:
        sub = probe_metrics([post[i] for i in keep], [pre[i] for i in keep])
        out.update({f"{k}_known": sub[k] for k in PROBE_COLUMNS})
    return out
