"""Choosing cases the model actually knows (so forgetting them is measurable)."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.evaluation.metrics import evaluate_probes

KNOWN_MIN_ACCURACY = 0.5
"""A case is *known* when the unedited model's argmax gives at least this share of its forget prompts' answer
tokens (teacher-forced): the known subset the scale tables report and the facts ``retain-set`` serves."""


def select_known_cases(
    model: torch.nn.Module,
    tok,
    cases: Sequence[UnlearnCase],
    n: Optional[int],
    min_accuracy: float = 1.0,
    batch_size: int = 64,
) -> List[UnlearnCase]:
    """The first ``n`` cases (in order; all with ``n=None``) whose forget probes, pooled, reach mean token
    accuracy ``min_accuracy``; scored in batches until ``n`` are found, ``ValueError`` when fewer qualify."""
    chosen: List[UnlearnCase] = []
    for start in range(0, len(cases), batch_size):
        batch = list(cases[start : start + batch_size])
        probes = [p for case in batch for p in case.forget]
        acc = evaluate_probes(model, tok, probes, batch_size=batch_size)["acc"]
        offset = 0
        for case in batch:
            values = acc[offset : offset + len(case.forget)]
            offset += len(case.forget)
            if values and sum(values) / len(values) >= min_accuracy:
                chosen.append(case)
                if len(chosen) == n:
                    return chosen
    if n is None:
        return chosen
    raise ValueError(f"only {len(chosen)} of {len(cases)} cases reach accuracy {min_accuracy}; {n} needed")
