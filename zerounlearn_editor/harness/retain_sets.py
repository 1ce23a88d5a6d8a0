"""Retain sets for benches: records drawn from the dataset, never leaking into scoring.

Two draw policies, each giving every forget case up to ``K`` other records of the dataset's whole
pool as retain requests without answers:

``--retain siblings:K``
    ``K`` records of the same relation (:attr:`UnlearnCase.relation`), drawn at random.
``--retain same-answer:K``
    records whose true answer (``request["ground_truth"]``, compared case-insensitively after
    stripping) equals the forget case's: first those of the same relation, then those of any
    relation; if fewer than ``K`` exist, same-relation records with other answers fill up to ``K``
    (so it degrades to ``siblings`` for an answer no other record shares). CounterFact's
    neighbourhood prompts are other subjects with the same relation *and* the same true answer,
    the facts an edit of that answer is most likely to damage.

Whatever the policy, a record is never drawn when

* it is one of the seed's sampled (forgotten and scored) cases,
* its subject equals a sampled case's subject, or occurs (case-insensitively, as a substring) in
  any evaluated prompt of the seed: forget prompts, paraphrases and neighbourhood prompts,
* its prompt is itself an evaluated prompt, or names a sampled case's subject (a retain prompt
  about the forgotten subject would protect the very fact being forgotten),
* it was already drawn.

So a retain fact never names a subject that the table scores. :func:`check_retain_disjoint`
re-checks a finished retain set against the scored cases (every draw calls it).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Sequence

from zerounlearn_editor.data.answer_retain import answer_key
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.harness.bench_config import (  # the spec is parsed with the config; re-exported here
    RETAIN_POLICIES,
    BenchConfigError,
    RetainDraw,
    parse_retain_spec,
)

__all__ = [
    "RETAIN_POLICIES",
    "RetainDraw",
    "parse_retain_spec",
    "evaluated_prompts",
    "draw_retain",
    "draw_sibling_retain",
    "draw_same_answer_retain",
    "same_answer_retain_groups",
    "check_retain_disjoint",
]

#: Draw policies ``parse_retain_spec`` accepts, as written in a spec (``policy:K``).


def evaluated_prompts(cases: Sequence[UnlearnCase]) -> List[str]:
    """Every prompt a bench scores for ``cases`` (forget, paraphrase, neighbourhood)."""
    return [p.prompt for case in cases for p in (*case.forget, *case.paraphrase, *case.neighbour)]


@dataclass(frozen=True)
class _Scored:
    """What a seed scores, folded for the leak test: sampled subjects and every evaluated prompt."""

    subjects: frozenset
    text: tuple
    prompts: frozenset

    @classmethod
    def of(cls, cases: Sequence[UnlearnCase]) -> "_Scored":
        prompts = evaluated_prompts(cases)
        subjects = frozenset(c.request["subject"].casefold().strip() for c in cases)
        return cls(subjects - {""}, tuple(p.casefold() for p in prompts), frozenset(p.strip() for p in prompts))

    def leaks(self, subject: str, prompt: str) -> bool:
        """True if a record (``subject``, ``prompt``) would touch what is scored: its subject is a
        sampled subject or occurs in a scored prompt, its prompt is a scored prompt, or its prompt
        names a sampled (forgotten) subject."""
        folded = subject.casefold().strip()
        if not folded or folded in self.subjects or prompt.strip() in self.prompts:
            return True
        if any(folded in text for text in self.text):
            return True
        folded_prompt = prompt.casefold()
        return any(scored in folded_prompt for scored in self.subjects)


def _answer(case: UnlearnCase) -> str:
    """A case's true answer, folded for comparison (``""`` when it has none)."""
    return answer_key(case.request.get("ground_truth"))


def _eligible(sampled: Sequence[UnlearnCase], pool: Sequence[UnlearnCase]) -> List[UnlearnCase]:
    """Pool records that may be drawn at all: not sampled, not leaking into a scored prompt (pool order)."""
    sampled_ids = {c.case_id for c in sampled}
    scored = _Scored.of(sampled)
    return [
        case for case in pool
        if case.case_id not in sampled_ids and not scored.leaks(case.request["subject"], case.request["prompt"])
    ]


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
    by_relation: Dict[str, List[UnlearnCase]] = {}
    for case in _eligible(sampled, pool):
        if case.relation is not None:
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


def draw_same_answer_retain(
    sampled: Sequence[UnlearnCase], pool: Sequence[UnlearnCase], k: int, seed: int
) -> List[Dict[str, str]]:
    """Retain requests ``[{"prompt", "subject"}]``: up to ``k`` same-answer records per sampled case.

    For each sampled case (in order), the ``k`` slots are filled tier by tier, at random within a
    tier, from eligible records not drawn yet:

    1. same relation and same true answer,
    2. another relation, same true answer,
    3. same relation, another answer (fill-up; the ``siblings`` policy's candidates).

    Answers are ``request["ground_truth"]`` compared case-insensitively after stripping; a case
    with an empty answer matches no answer. A case without a ``relation`` gets only tier-2 records.
    Deterministic in ``seed``; the leak exclusions are those of :func:`draw_sibling_retain`.
    """
    groups = same_answer_retain_groups(sampled, pool, k, seed)
    chosen = [{"prompt": r.request["prompt"], "subject": r.request["subject"]} for group in groups for r in group]
    check_retain_disjoint(chosen, sampled)
    return chosen


def same_answer_retain_groups(
    sampled: Sequence[UnlearnCase], pool: Sequence[UnlearnCase], k: int, seed: int
) -> List[List[UnlearnCase]]:
    """The records :func:`draw_same_answer_retain` draws, one list per sampled case (tier order)."""
    by_answer: Dict[str, List[UnlearnCase]] = {}
    by_relation: Dict[str, List[UnlearnCase]] = {}
    for case in _eligible(sampled, pool):
        if _answer(case):
            by_answer.setdefault(_answer(case), []).append(case)
        if case.relation is not None:
            by_relation.setdefault(case.relation, []).append(case)
    rng = random.Random(f"retain-same-answer:{k}:{seed}")
    groups: List[List[UnlearnCase]] = []
    taken: set = set()
    for case in sampled:
        answer, relation = _answer(case), case.relation
        same_answer = by_answer.get(answer, []) if answer else []
        siblings = by_relation.get(relation, []) if relation is not None else []
        tiers = (
            [c for c in same_answer if relation is not None and c.relation == relation],
            [c for c in same_answer if relation is None or c.relation != relation],
            [c for c in siblings if not answer or _answer(c) != answer],
        )
        group: List[UnlearnCase] = []
        for tier in tiers:
            candidates = [c for c in tier if c.case_id not in taken]
            for record in rng.sample(candidates, min(k - len(group), len(candidates))):
                taken.add(record.case_id)
                group.append(record)
        groups.append(group)
    return groups


def draw_retain(
    draw: RetainDraw, sampled: Sequence[UnlearnCase], pool: Sequence[UnlearnCase], seed: int
) -> List[Dict[str, str]]:
    """The retain set of ``sampled`` under ``draw``'s policy (see :func:`draw_sibling_retain`,
    :func:`draw_same_answer_retain`)."""
    if draw.policy == "same-answer":
        return draw_same_answer_retain(sampled, pool, draw.k, seed)
    return draw_sibling_retain(sampled, pool, draw.k, seed)


def check_retain_disjoint(retain: Sequence[Dict[str, str]], scored: Sequence[UnlearnCase]) -> None:
    """Raise :class:`BenchConfigError` if a retain request names a scored subject or prompt."""
    scored_set = _Scored.of(scored)
    for index, request in enumerate(retain):
        if scored_set.leaks(request["subject"], request["prompt"]):
            raise BenchConfigError(
                f"retain request {index} ({request['subject']!r}: {request['prompt']!r}) overlaps the scored "
                "cases: its subject or prompt appears in a forget, paraphrase or neighbourhood prompt, or its "
                "prompt names a forgotten subject"
            )
