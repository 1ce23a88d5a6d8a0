"""A retain set aimed at the facts an edit of many answers damages: other facts that share a forgotten answer.

Forgetting "Danielle Darrieux's mother tongue is French" by pushing " French" down hurts most the facts that must
still give " French" (CounterFact's neighbourhood prompts are exactly those: same relation, same answer).
:func:`draw_answer_retain` gives each fact to forget up to ``k`` records of a pool whose answer is the same
(compared case-insensitively after stripping), to be kept by a retain-aware edit (benchmarks/RESULTS.md 12.29).

Pure: records in, records out (no model). A pool record is never drawn when

* it has no answer, or its subject does not occur in its prompt;
* its subject equals a forget fact's subject, or occurs (case-insensitively, as a substring) in a forget prompt;
* its prompt is a forget prompt, or contains a forget subject (case-insensitively, as a substring: a short subject
  such as "US" also rules out "famous"; the draw errs on the side of keeping nothing forgotten);
* the same prompt and subject were drawn already.
"""
from __future__ import annotations

import random
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["answer_key", "draw_answer_retain", "eligible_pool"]


def answer_key(answer: Optional[str]) -> str:
    """An answer folded for comparison (``""`` for none)."""
    return str(answer or "").strip().casefold()


def eligible_pool(forget: Sequence[Mapping[str, Any]], pool: Sequence[Mapping[str, Any]]) -> List[Dict[str, str]]:
    """The pool records that may be drawn against ``forget`` (see the module docstring), in pool order, each as
    ``{"prompt", "subject", "answer"}``. ``forget`` and ``pool``: mappings with ``prompt``, ``subject`` and
    ``answer`` (``None`` when unknown)."""
    subjects = {str(f["subject"]).casefold().strip() for f in forget} - {""}
    prompts = {str(f["prompt"]).strip() for f in forget}
    folded_prompts = [str(f["prompt"]).casefold() for f in forget]
    kept: List[Dict[str, str]] = []
    seen: set = set()
    for record in pool:
        prompt, subject, answer = str(record["prompt"]), str(record["subject"]), record.get("answer")
        folded = subject.casefold().strip()
        if not answer_key(answer) or not folded or subject not in prompt or (prompt, subject) in seen:
            continue
        if folded in subjects or prompt.strip() in prompts or any(folded in text for text in folded_prompts):
            continue
        if any(name in prompt.casefold() for name in subjects):
            continue
        seen.add((prompt, subject))
        kept.append({"prompt": prompt, "subject": subject, "answer": str(answer)})
    return kept


def draw_answer_retain(forget: Sequence[Mapping[str, Any]], pool: Sequence[Mapping[str, Any]], k: int,
                       seed: int = 0, serve: Optional[Sequence[bool]] = None) -> List[List[Dict[str, str]]]:
    """Per forget fact (in order), up to ``k`` eligible pool records (:func:`eligible_pool`) with its answer, drawn
    at random (deterministic in ``seed``) among those not drawn for an earlier fact; ``[]`` for a fact without an
    answer or one ``serve`` marks False (e.g. a fact the model does not give: nothing to shield).
    ``len(result) == len(forget)``. Raises ValueError for ``k < 1`` or a ``serve`` of another length."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if serve is not None and len(serve) != len(forget):
        raise ValueError(f"serve has {len(serve)} entries for {len(forget)} facts")
    by_answer: Dict[str, List[Dict[str, str]]] = {}
    for record in eligible_pool(forget, pool):
        by_answer.setdefault(answer_key(record["answer"]), []).append(record)
    rng = random.Random(f"answer-retain:{k}:{seed}")
    taken: set = set()
    groups: List[List[Dict[str, str]]] = []
    for index, fact in enumerate(forget):
        candidates = [] if serve is not None and not serve[index] else [
            r for r in by_answer.get(answer_key(fact.get("answer")), []) if (r["prompt"], r["subject"]) not in taken]
        group = rng.sample(candidates, min(k, len(candidates)))
        taken.update((r["prompt"], r["subject"]) for r in group)
        groups.append(group)
    return groups
