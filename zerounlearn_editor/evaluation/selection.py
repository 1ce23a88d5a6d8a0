"""Choosing cases the model actually knows (so forgetting them is measurable)."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.evaluation.metrics import evaluate_probes


def select_known_cases(
    model: torch.nn.Module,
    tok,
    cases: Sequence[UnlearnCase],
    n: Optional[int],
    min_accuracy: float = 1.0,
    batch_size: int = 64,
) -> List[UnlearnCase]:
    """The first ``n`` cases (in the given order) whose forget probes the model answers.

    A case qualifies when the mean teacher-forced token accuracy of its forget probes is at
    least ``min_accuracy`` (all forget probes pooled: RWKU's level 1 clozes and level 2
    questions of the target, MQuAKE's single-hop cloze, CounterFact's forget prompt). Cases are scored in batches until ``n`` are found; raises
    ``ValueError`` when fewer than ``n`` qualify. ``n=None`` returns every qualifying case.
    """
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
