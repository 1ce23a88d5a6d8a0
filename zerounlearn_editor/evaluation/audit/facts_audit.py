"""The audit of ``zerounlearn unlearn --audit``: the facts file's facts, before and after the edit.

Records may carry ``paraphrases`` and ``questions`` (lists of strings); records without an answer are
not audited. Borrowed facts come from :mod:`zerounlearn_editor.data.facts` and the retain file's facts
with answers.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Sequence, Tuple

from zerounlearn_editor.data.corpus import load_corpus
from zerounlearn_editor.data.fact_records import FactRecord
from zerounlearn_editor.evaluation.audit.items import (
    AuditItem,
    PoolFact,
    audit_pool,
    builtin_pool,
    items_from_facts,
    pool_from_facts,
)


def facts_items(records: Sequence[FactRecord]) -> List[AuditItem]:
    """Audit items of the facts file's checked records (:func:`~zerounlearn_editor.data.fact_records.read_facts_file`)
    that have an answer; an item's ``case_id`` is its record's position in ``records`` (the edit request's index)."""
    answered = [(index, r) for index, r in enumerate(records) if r.answer is not None]
    items = items_from_facts([{"prompt": r.prompt, "subject": r.subject, "answer": r.answer,
                               "paraphrases": r.paraphrases, "questions": r.questions} for _, r in answered])
    return [dataclasses.replace(item, case_id=str(index)) for (index, _), item in zip(answered, items)]


def facts_pool(retain: Sequence[Tuple[str, str, str]] = ()) -> List[PoolFact]:
    """The retain facts ``(prompt, subject, answer)`` whose subject occurs in the prompt, then the built-in
    hand-written facts (:func:`~.items.audit_pool`: each fact once)."""
    triples = [(prompt, subject, answer.strip()) for prompt, subject, answer in retain if subject and subject in prompt]
    return audit_pool(pool_from_facts(triples), builtin_pool())


def format_facts_audit(audit: Mapping[str, Any]) -> str:
    """Markdown: probe | recovered % before | after | same-relation material (items of all) | note
    (``uninformative``: the unedited model recovers ~0 %, :data:`~.suite.UNINFORMATIVE_MAX`)."""
    from zerounlearn_editor.evaluation.audit.suite import uninformative

    flat = set(uninformative(audit["before"]))
    lines = ["### Robustness audit (% of the forgotten facts recovered)", "",
             "| probe | before | after | same relation | note |", "|---|---|---|---|---|"]
    for probe, before in audit["before"].items():
        after = audit["after"].get(probe, {})
        cell = lambda r: "-" if r.get("recovered") is None else f"{r['recovered']:.0f}"  # noqa: E731
        same = f"{before['same_relation']}/{before['n']}" if "same_relation" in before else ""
        note = "uninformative (unedited ~0)" if probe in flat else ""
        lines.append(f"| {probe} | {cell(before)} | {cell(after)} | {same} | {note} |")
    return "\n".join(lines)


def generic_passages(corpus: str, limit: int = 400) -> List[str]:
    """Generic text for the relearning control: the first passages of the statistics corpus."""
    return load_corpus(corpus, limit=limit).texts
