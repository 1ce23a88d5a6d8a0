"""The audit of ``zerounlearn unlearn --audit``: the facts file's facts, before and after the edit.

Records may carry ``paraphrases`` and ``questions`` (lists of strings); records without an answer are
not audited. Borrowed facts come from :mod:`zerounlearn_editor.data.facts` and the retain file's facts
with answers.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, List, Mapping, Sequence, Tuple, Union

from zerounlearn_editor.data.corpus import load_corpus
from zerounlearn_editor.data.record_files import RecordFileError, read_record_list
from zerounlearn_editor.evaluation.audit.items import (
    AuditItem,
    PoolFact,
    audit_pool,
    builtin_pool,
    items_from_facts,
    pool_from_facts,
)


def check_probe_fields(record: Mapping[str, Any], index: int, path: Union[str, Path]) -> None:
    """``paraphrases`` / ``questions``, when present, must be lists of non-empty strings (error names the field)."""
    for name in ("paraphrases", "questions"):
        value = record.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise RecordFileError(
                f"{path}: record {index}: field {name!r} must be a list of non-empty strings, got {value!r}"
            )


def facts_items(path: Union[str, Path]) -> List[AuditItem]:
    """Audit items of the facts file's records that have an answer (``answer`` or ``ground_truth``); an
    item's ``case_id`` is its record's index in the file (the edit request's index)."""
    records = read_record_list(path, what="facts to forget")
    answered = [(index, dict(r, answer=r.get("answer", r.get("ground_truth")))) for index, r in enumerate(records)]
    answered = [(index, r) for index, r in answered if isinstance(r["answer"], str) and r["answer"].strip()]
    items = items_from_facts([r for _, r in answered])
    return [dataclasses.replace(item, case_id=str(index)) for (index, _), item in zip(answered, items)]


def facts_pool(retain: Sequence[Mapping[str, Any]] = ()) -> List[PoolFact]:
    """The retain facts ``{prompt, subject, answer}`` that have answers, then the built-in hand-written facts
    (:func:`~.items.audit_pool`: each fact once)."""
    triples: List[Tuple[str, str, str]] = []
    for r in retain:
        answer = r.get("answer", r.get("ground_truth"))
        if isinstance(answer, str) and answer.strip() and r.get("subject") and r["subject"] in r.get("prompt", ""):
            triples.append((r["prompt"], r["subject"], answer.strip()))
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
