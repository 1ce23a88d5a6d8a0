"""Retain sets for benches: same-relation siblings drawn from the dataset, never leaking into scoring.

``--retain siblings:K`` gives every forget case ``K`` other records of the same relation
(:attr:`UnlearnCase.relation`) from the dataset's whole pool, as retain requests without answers.
A record is never drawn when

* it is one of the seed's sampled (forgotten and scored) cases,
* its subject equals a sampled case's subject, or occurs (case-insensitively, as a substring) in
  any evaluated prompt of the seed: forget prompts, paraphrases and neighbourhood prompts,
* its prompt is itself an evaluated prompt, or it was already drawn.

So a retain fact never names a subject that the table scores. :func:`check_retain_disjoint`
re-checks a finished retain set against the scored cases (the runner calls it on every draw).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ..data.types import UnlearnCase
from .config import BenchConfigError

__all__ = ["RetainDraw", "parse_retain_spec", "evaluated_prompts", "draw_sibling_retain", "check_retain_disjoint"]

_SPEC = re.compile(r"^siblings:(\d+)$")


@dataclass(frozen=True)
class RetainDraw:
    """How a bench draws its retain sets: ``K`` same-relation siblings per forget case."""

    k: int

    @property
    def spec(self) -> str:
        return f"siblings:{self.k}"

    def describe(self) -> str:
        """One line for the report: how the retain set was drawn."""
        return (
            f"retain set: per forget case {self.k} other records of the same relation from the whole dataset, "
            "excluding the seed's sampled cases and every record whose subject occurs in a scored "
            "(forget, paraphrase or neighbourhood) prompt; prompts only, no answers"
        )


def parse_retain_spec(spec: Optional[str]) -> Optional[RetainDraw]:
    """``"siblings:K"`` (K >= 1) -> :class:`RetainDraw`; ``None``/``""``/``"none"`` -> ``None``."""
    if spec is None or str(spec).strip().lower() in ("", "none"):
        return None
    match = _SPEC.match(str(spec).strip())
    if not match or int(match.group(1)) < 1:
        raise BenchConfigError(f"retain: expected 'siblings:K' with K >= 1 (e.g. siblings:5), got {spec!r}")
    return RetainDraw(int(match.group(1)))


def evaluated_prompts(cases: Sequence[UnlearnCase]) -> List[str]:
    """Every prompt a bench scores for ``cases`` (forget, paraphrase, neighbourhood)."""
    return [p.prompt for case in cases for p in (*case.forget, *case.paraphrase, *case.neighbour)]


def _leaks(subject: str, prompt: str, subjects: set, scored_text: List[str], scored_prompts: set) -> bool:
    folded = subject.casefold().strip()
    if not folded or folded in subjects or prompt.strip() in scored_prompts:
        return True
    return any(folded in text for text in scored_text)


def draw_sibling_retain(
    sampled: Sequence[UnlearnCase], pool: Sequence[UnlearnCase], k: int, seed: int
) -> List[Dict[str, str]]:
    """Retain requests ``[{"prompt", "subject"}]``: up to ``k`` same-relation siblings per sampled case.

    Deterministic in ``seed``. Cases are served in order; a case with fewer than ``k`` eligible
    siblings gets what there is. Raises :class:`BenchConfigError` if a sampled case has no
    ``relation`` (the dataset format does not say which facts are siblings).
    """
    missing = [c.case_id for c in sampled if c.relation is None]
    if missing:
        raise BenchConfigError(
            f"retain siblings: the cases carry no relation (e.g. case {missing[0]}); this dataset format "
            "cannot say which facts are siblings (CounterFact formats can)"
        )
    sampled_ids = {c.case_id for c in sampled}
    subjects = {c.request["subject"].casefold().strip() for c in sampled}
    prompts = evaluated_prompts(sampled)
    scored_text = [p.casefold() for p in prompts]
    scored_prompts = {p.strip() for p in prompts}
    by_relation: Dict[str, List[UnlearnCase]] = {}
    for case in pool:
        if case.case_id in sampled_ids or case.relation is None:
            continue
        if _leaks(case.request["subject"], case.request["prompt"], subjects, scored_text, scored_prompts):
            continue
        by_relation.setdefault(case.relation, []).append(case)
    rng = random.Random(f"retain-siblings:{k}:{seed}")
    chosen: List[Dict[str, str]] = []
    taken: set = set()
    for case in sampled:
        candidates = [c for c in by_relation.get(case.relation, []) if c.case_id not in taken]
        for sibling in rng.sample(candidates, min(k, len(candidates))):
            taken.add(sibling.case_id)
            chosen.append({"prompt": sibling.request["prompt"], "subject": sibling.request["subject"]})
    check_retain_disjoint(chosen, sampled)
    return chosen


def check_retain_disjoint(retain: Sequence[Dict[str, str]], scored: Sequence[UnlearnCase]) -> None:
    """Raise :class:`BenchConfigError` if a retain request names a scored subject or prompt."""
    subjects = {c.request["subject"].casefold().strip() for c in scored}
    prompts = evaluated_prompts(scored)
    scored_text = [p.casefold() for p in prompts]
    scored_prompts = {p.strip() for p in prompts}
    for index, request in enumerate(retain):
        if _leaks(request["subject"], request["prompt"], subjects, scored_text, scored_prompts):
            raise BenchConfigError(
                f"retain request {index} ({request['subject']!r}: {request['prompt']!r}) overlaps the scored "
                "cases: its subject or prompt appears in a forget, paraphrase or neighbourhood prompt"
            )
