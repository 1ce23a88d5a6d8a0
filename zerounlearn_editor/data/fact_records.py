"""Facts files, read and checked once: the typed value ``zerounlearn unlearn`` passes inward.

A facts file is a JSON / JSONL / YAML list of ``{"prompt", "subject", "answer"}`` mappings (``answer`` optional, also
spelled ``ground_truth``, EasyEdit's name; ``target_new`` optional; ``paraphrases`` / ``questions`` optional lists of
strings, probed by the audit). :func:`read_facts_file` reads it once and gives a :class:`FactsFile` of
:class:`FactRecord` s; :func:`answer_of` is the one place the ``answer`` / ``ground_truth`` alias is resolved.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from zerounlearn_editor.data.record_files import RecordFileError, read_record_list, require_fields

LOG = logging.getLogger(__name__)

FACT_FIELDS = ("prompt", "subject", "answer", "ground_truth", "target_new", "paraphrases", "questions")


def answer_of(record: Mapping[str, Any]) -> Any:
    """The answer of a fact record, as given: its ``answer``, else its ``ground_truth`` (None without either)."""
    return record["answer"] if "answer" in record else record.get("ground_truth")


def given_answer(record: Mapping[str, Any]) -> Optional[str]:
    """:func:`answer_of` when it is a non-empty string (a scorable answer), else None."""
    answer = answer_of(record)
    return answer if isinstance(answer, str) and answer.strip() else None


@dataclass(frozen=True)
class FactRecord:
    """One checked record of a facts file: ``index`` its position in the file, ``target_new`` None when the record
    gives none (``""``: the YAML's neutral target), ``paraphrases`` / ``questions`` the audit's probes."""

    index: int
    prompt: str
    subject: str
    answer: Optional[str]
    target_new: Optional[str] = None
    paraphrases: Tuple[str, ...] = ()
    questions: Tuple[str, ...] = ()

    def request(self) -> Dict[str, Any]:
        """The EasyEdit request dict ``{"prompt", "subject", "ground_truth"[, "target_new"]}``."""
        request: Dict[str, Any] = {"prompt": self.prompt, "subject": self.subject, "ground_truth": self.answer}
        if self.target_new is not None:
            request["target_new"] = self.target_new
        return request


@dataclass(frozen=True)
class FactsFile:
    """A facts file read and checked once (:func:`read_facts_file`): its path and records, a repeated fact once."""

    path: Path
    records: Tuple[FactRecord, ...]

    def requests(self) -> List[Dict[str, Any]]:
        """The records' EasyEdit request dicts (:meth:`FactRecord.request`)."""
        return [record.request() for record in self.records]


def check_probe_fields(record: Mapping[str, Any], index: int, path: Union[str, Path]) -> None:
    """``paraphrases`` / ``questions``, when present, must be lists of non-empty strings (error names the field)."""
    for name in ("paraphrases", "questions"):
        value = record.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise RecordFileError(
                f"{path}: record {index}: field {name!r} must be a list of non-empty strings, got {value!r}"
            )


def _fact_record(record: Mapping[str, Any], index: int, path: Union[str, Path]) -> FactRecord:
    """One record checked (errors name the file, record index and field)."""
    unknown = sorted(set(record) - set(FACT_FIELDS))
    if unknown:
        raise RecordFileError(f"{path}: record {index}: unknown field(s) {unknown} "
                              "(allowed: prompt, subject, answer, target_new, paraphrases, questions)")
    check_probe_fields(record, index, path)
    if "answer" in record and "ground_truth" in record:
        raise RecordFileError(f"{path}: record {index}: give 'answer' or 'ground_truth', not both")
    answer = answer_of(record)
    if answer is not None and (not isinstance(answer, str) or not answer.strip()):
        raise RecordFileError(f"{path}: record {index}: field 'answer' must be a non-empty string, got {answer!r}")
    target = record.get("target_new")
    if target is not None and not isinstance(target, str):  # a list or {"str": ...} would be read in part
        raise RecordFileError(
            f"{path}: record {index}: field 'target_new' must be a string (\"\" = the YAML's neutral target), "
            f"got {type(target).__name__} {target!r}"
        )
    if record["subject"] not in record["prompt"]:
        raise RecordFileError(
            f"{path}: record {index}: field 'subject' {record['subject']!r} does not occur in the prompt "
            f"{record['prompt']!r}"
        )
    return FactRecord(index, record["prompt"], record["subject"], answer, target,
                      tuple(record.get("paraphrases", ())), tuple(record.get("questions", ())))


def read_facts_file(path: Union[str, Path]) -> FactsFile:
    """Read and check a facts file once; errors name the file, record index and field. A repeated fact (same prompt
    and subject) is kept once with a warning; a repeat with another answer or target is an error."""
    records = read_record_list(path, what="facts to forget")
    require_fields(records, ("prompt", "subject"), path)
    return FactsFile(Path(path), _drop_repeats([_fact_record(r, i, path) for i, r in enumerate(records)], path))


def _drop_repeats(records: Sequence[FactRecord], path: Union[str, Path]) -> Tuple[FactRecord, ...]:
    """``records`` without a repeated fact (same prompt and subject): an exact repeat is dropped with a warning
    naming both records; a repeat with another answer or target is an error (the ledger keeps one record a fact)."""
    first: Dict[Tuple[str, str], FactRecord] = {}
    kept: List[FactRecord] = []
    dropped: List[str] = []
    for record in records:
        earlier = first.setdefault((record.prompt, record.subject), record)
        if earlier is record:
            kept.append(record)
            continue
        for name in ("answer", "target_new"):
            if getattr(record, name) != getattr(earlier, name):
                raise RecordFileError(
                    f"{path}: record {record.index}: same prompt and subject as record {earlier.index} but another "
                    f"{name} ({getattr(record, name)!r} vs {getattr(earlier, name)!r}); give one record per fact")
        dropped.append(f"record {record.index} (= record {earlier.index})")
    if dropped:
        LOG.warning("%s: %d repeated fact(s) dropped, each edited once: %s", path, len(dropped), ", ".join(dropped))
    return tuple(kept)


__all__ = ["FACT_FIELDS", "FactRecord", "FactsFile", "answer_of", "check_probe_fields", "given_answer",
           "read_facts_file"]
