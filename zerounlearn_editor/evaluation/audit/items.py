"""What the audit probes: the forgotten facts (:class:`AuditItem`) and the facts it may borrow
(:class:`PoolFact`: in-context examples, multiple-choice distractors, relearning data).

Borrowed facts never name a forgotten subject or answer (case-insensitive, in prompt or answer):
"The capital of France is Paris." would hand the model the forgotten answer. Same-relation facts come
first, then facts of other relations. Every draw is seeded.

A fact's relation is the dataset's relation id where it has one, else its *template*: the prompt with
the subject replaced by ``{}``, whitespace collapsed, lower-cased (:func:`relation_of`); two templates are
the same relation when the content words of one are among the other's (:func:`related`: CounterFact words
one relation several ways, ``"The capital of {} is"``, ``"{}'s capital city,"``). The pool
(:func:`audit_pool`) is the dataset's facts plus the package's built-in facts
(:mod:`zerounlearn_editor.data.facts`: capitals and general facts); a built-in fact whose template is
a template of the dataset's relation ``R`` counts as relation ``R``. Built-in facts are drawn only after
the dataset's facts of the same relation, so they fill in where the dataset is thin (a ``-deep.yaml`` edit
sees them as few-shot contexts: where they are drawn, those columns are not held out for it).
"""
from __future__ import annotations

import dataclasses
import functools
import random
import re
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from zerounlearn_editor.data.types import Probe, UnlearnCase


@dataclass(frozen=True)
class PoolFact:
    """A fact the audit may show the model: ``prompt + " " + answer``; ``relation`` may be None; ``builtin``:
    one of the package's hand-written facts (borrowed after the dataset's facts of the same relation)."""

    prompt: str
    subject: str
    answer: str
    relation: Optional[str] = None
    builtin: bool = False


@dataclass(frozen=True)
class AuditItem:
    """One forgotten fact and its probe prompts: other phrasings with their answers (``paraphrases``,
    ``questions``), a dataset's own probe levels (``groups``, RWKU: ``fill_in_blank``, ``question``, ...)."""

    case_id: str
    prompt: str
    subject: str
    answer: str
    relation: Optional[str] = None
    paraphrases: Tuple[Probe, ...] = ()
    questions: Tuple[Probe, ...] = ()
    groups: Mapping[str, Tuple[Probe, ...]] = field(default_factory=dict)


RWKU_LEVELS = {"forget_level1": "fill_in_blank", "forget_level2": "question", "forget_level3": "adversarial"}


def items_from_cases(cases: Sequence[UnlearnCase]) -> List[AuditItem]:
    """Audit items of dataset cases: the request's prompt and answer, paraphrases, questions (MQuAKE's
    paraphrase is a question, used for both; RWKU: the level-2 probes, with its levels as ``groups``)."""
    items = []
    for case in cases:
        request = case.request
        paraphrases: Tuple[Probe, ...] = tuple(case.paraphrase)
        questions: Tuple[Probe, ...] = ()
        groups: Dict[str, Tuple[Probe, ...]] = {}
        if case.source == "mquake":
            questions = tuple(case.paraphrase)
        if case.source == "rwku":
            paraphrases = ()
            questions = tuple(case.probe_groups.get("forget_level2", ()))
            groups = {
                name: tuple(case.probe_groups[key]) for key, name in RWKU_LEVELS.items() if case.probe_groups.get(key)
            }
        items.append(AuditItem(case.case_id, request["prompt"], request["subject"], request["ground_truth"],
                               _case_relation(case), paraphrases, questions, groups))
    return items


def pool_from_cases(cases: Sequence[UnlearnCase]) -> List[PoolFact]:
    """One pool fact per case (its request), with the case's relation (its template when it has none)."""
    return [PoolFact(c.request["prompt"], c.request["subject"], c.request["ground_truth"], _case_relation(c))
            for c in cases]


def relation_of(prompt: str, subject: str) -> str:
    """A fact's template: ``prompt`` with its first ``subject`` replaced by ``{}``, whitespace collapsed,
    lower-cased (``"The capital of France is"`` -> ``"the capital of {} is"``)."""
    return " ".join(prompt.replace(subject, "{}", 1).split()).lower()


_FUNCTION_WORDS = frozenset("the a an of is was are were be been which who whose that has had have s".split())
_PREPOSITIONS = frozenset("in on at by for from to with as into of".split())


@functools.lru_cache(maxsize=4096)
def template_words(template: str) -> FrozenSet[str]:
    """The content words of a template (lower-case letters runs, function words dropped):
    ``"{}'s capital city is"`` -> ``{"capital", "city"}``, ``"the capital of {} is"`` -> ``{"capital"}``."""
    return frozenset(w for w in re.findall(r"[a-z]+", template.replace("{}", " ").lower()) if w not in _FUNCTION_WORDS)


def related(a: Optional[str], b: Optional[str]) -> bool:
    """Whether relations ``a`` and ``b`` are the same relation: equal, or both templates (they hold ``{}``)
    whose content words (:func:`template_words`) are one within the other, the smaller holding a word that is
    not a preposition (``"the capital of {} is"`` ~ ``"{}'s capital city,"``; ``"{}, in"`` only equals
    itself). Relation ids are compared as they are."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    if "{}" not in a or "{}" not in b:
        return False
    small, large = sorted((template_words(a), template_words(b)), key=len)
    return bool(small - _PREPOSITIONS) and small <= large


def _case_relation(case: UnlearnCase) -> str:
    """The case's relation id, else its request's template (:func:`relation_of`)."""
    if case.relation is not None and "{}" not in case.relation:
        return case.relation
    return relation_of(case.request["prompt"], case.request["subject"])


def builtin_pool() -> List[PoolFact]:
    """The package's hand-written facts (:mod:`zerounlearn_editor.data.facts`), relation = template."""
    from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS

    return [
        dataclasses.replace(f, builtin=True)
        for f in pool_from_facts(CAPITALS_TO_FORGET + OTHER_CAPITALS + UNRELATED_FACTS)
    ]


def audit_pool(*parts: Sequence[PoolFact]) -> List[PoolFact]:
    """The pool facts of ``parts`` (e.g. the dataset's, then :func:`builtin_pool`), each ``(prompt, answer)``
    once. A fact whose relation is a template used by facts of one relation id takes that id (a built-in
    ``"The capital of {} is"`` fact joins CounterFact's ``P36`` when the dataset holds a :func:`related` template)."""
    facts = [f for part in parts for f in part]
    ids: Dict[str, set] = {}  # template -> the relation ids of the facts using it
    for f in facts:
        if f.relation is not None and "{}" not in f.relation:
            ids.setdefault(relation_of(f.prompt, f.subject), set()).add(f.relation)
    out: List[PoolFact] = []
    seen = set()
    for f in facts:
        key = (f.prompt.strip(), f.answer.strip().lower())
        if key in seen:
            continue
        seen.add(key)
        if f.relation is None or "{}" in f.relation:
            template = relation_of(f.prompt, f.subject)
            named = {r for t, rs in ids.items() if related(t, template) for r in rs}
            f = dataclasses.replace(f, relation=next(iter(named)) if len(named) == 1 else template)
        out.append(f)
    return out


def items_from_facts(records: Sequence[Mapping[str, Any]]) -> List[AuditItem]:
    """Items of facts-file records ``{prompt, subject, answer[, paraphrases][, questions]}``, checked."""
    items = []
    for index, record in enumerate(records):
        answer = str(record["answer"]).strip()
        items.append(AuditItem(
            str(index), record["prompt"], record["subject"], answer, relation_of(record["prompt"], record["subject"]),
            tuple(Probe(p.strip(), answer) for p in record.get("paraphrases") or ()),
            tuple(Probe(q.strip(), answer) for q in record.get("questions") or ()),
        ))
    return items


def pool_from_facts(facts: Sequence[Tuple[str, str, str]]) -> List[PoolFact]:
    """Pool facts from ``(prompt, subject, answer)`` triples; relation = the prompt's template."""
    return [PoolFact(p, s, a, relation_of(p, s)) for p, s, a in facts]


def forbidden_of(items: Sequence[AuditItem]) -> Tuple[str, ...]:
    """Everything a borrowed fact must not name: every item's subject and answer, lower-cased."""
    words = {w.strip().lower() for item in items for w in (item.subject, item.answer) if w.strip()}
    return tuple(sorted(words))


def allowed_facts(pool: Sequence[PoolFact], forbidden: Sequence[str]) -> List[PoolFact]:
    """The pool facts whose prompt and answer (case-insensitive) contain no forbidden word."""
    return [f for f in pool if not any(word in f"{f.prompt} {f.answer}".lower() for word in forbidden)]


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def _shuffled(rng: random.Random, facts: List[PoolFact]) -> List[PoolFact]:
    """The dataset's facts, then the built-in ones, each group shuffled by ``rng`` (no built-in fact: the
    draw is the one of a dataset-only pool)."""
    data = [f for f in facts if not f.builtin]
    builtin = [f for f in facts if f.builtin]
    rng.shuffle(data)
    rng.shuffle(builtin)
    return data + builtin


def borrow(pool: Sequence[PoolFact], relation: Optional[str], k: int, forbidden: Sequence[str], seed: int,
           tag: str) -> List[PoolFact]:
    """``k`` allowed pool facts (shuffled with ``seed`` and ``tag``): the dataset's of the same relation, the
    built-in ones of the same relation, then the dataset's others, then the built-in others."""
    allowed = allowed_facts(pool, forbidden)
    same = [f for f in allowed if related(f.relation, relation)]
    other = [f for f in allowed if not related(f.relation, relation)]
    rng = _rng(seed, tag)
    same = _shuffled(rng, same)
    other = _shuffled(rng, other)
    return (same + other)[:k]


def distractor_facts(item: AuditItem, pool: Sequence[PoolFact], k: int, forbidden: Sequence[str],
                     seed: int) -> List[PoolFact]:
    """The pool facts giving ``k`` distinct wrong answers, same relation first; never a forgotten answer or
    the item's own."""
    chosen: List[PoolFact] = []
    seen = {item.answer.strip().lower()}
    for fact in borrow(pool, item.relation, len(pool), forbidden, seed, f"mc:{item.case_id}"):
        key = fact.answer.strip().lower()
        if key not in seen:
            seen.add(key)
            chosen.append(fact)
        if len(chosen) == k:
            break
    return chosen


def distractors(item: AuditItem, pool: Sequence[PoolFact], k: int, forbidden: Sequence[str],
                seed: int) -> List[str]:
    """``k`` distinct wrong answers, same relation first; never a forgotten answer or the item's own."""
    return [f.answer.strip() for f in distractor_facts(item, pool, k, forbidden, seed)]


def same_relation(item: AuditItem, facts: Sequence[PoolFact]) -> int:
    """How many of ``facts`` share ``item``'s relation."""
    return sum(1 for f in facts if related(f.relation, item.relation))


def relearn_facts(items: Sequence[AuditItem], pool: Sequence[PoolFact], n: int, forbidden: Sequence[str],
                  seed: int) -> List[PoolFact]:
    """Up to ``n`` allowed facts for relearning, taken round-robin over the items' relations, then any."""
    relations = list(dict.fromkeys(item.relation for item in items if item.relation is not None))
    rng = _rng(seed, "relearn")
    allowed = allowed_facts(pool, forbidden)
    by_relation = {}
    for r in relations:  # taken from the end: the dataset's facts first, then the built-in ones
        ordered = _shuffled(rng, [f for f in allowed if related(f.relation, r)])
        by_relation[r] = [f for f in ordered if f.builtin] + [f for f in ordered if not f.builtin]
    chosen: List[PoolFact] = []
    while len(chosen) < n and any(by_relation.values()):
        for relation in relations:
            if by_relation[relation] and len(chosen) < n:
                fact = by_relation[relation].pop()
                if fact not in chosen:  # related templates can share a fact
                    chosen.append(fact)
    rest = _shuffled(rng, [f for f in allowed if f not in chosen])
    return chosen + rest[: n - len(chosen)]


def rtt_split(n_items: int, seed: int) -> Tuple[List[int], List[int]]:
    """The relearning split of ``n_items`` forgotten facts (item indices, each list ascending): ``n_items // 2``
    facts to fine-tune on and the other ``n_items - n_items // 2`` to measure, drawn by a shuffle seeded with
    ``seed`` (the same facts for every row of an audit). ``ValueError`` for fewer than 2 facts (one half would
    be empty)."""
    if n_items < 2:
        raise ValueError(f"the relearning split needs at least 2 forgotten facts, got {n_items}")
    order = list(range(n_items))
    _rng(seed, "rtt").shuffle(order)
    cut = n_items // 2
    return sorted(order[:cut]), sorted(order[cut:])
