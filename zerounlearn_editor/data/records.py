"""Helpers shared by the loaders: reading JSON record files, validated field access (:class:`RecordReader`:
a malformed record raises :class:`DataFormatError` naming file, record and dotted field), building cases.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from zerounlearn_editor.data.types import DataFormatError, Probe, UnlearnCase
from zerounlearn_editor.support.structured_files import read_structured

logger = logging.getLogger(__name__)

_MISSING = object()


def read_json_records(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """The list of objects (records) in a JSON file (``FileNotFoundError``, or :class:`DataFormatError`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    data = read_structured(path, "JSON records", lambda message: DataFormatError(path, message),
                           suffix=".json")
    if not isinstance(data, list):
        raise DataFormatError(path, f"expected a JSON list of records, got {type(data).__name__}")
    for index, record in enumerate(data):
        if not isinstance(record, dict):
            raise DataFormatError(path, f"expected an object, got {type(record).__name__}", index=index)
    return data


class RecordReader:
    """Typed, validated access to the fields of one record by dotted name (``"requested_rewrite.subject"``).

    Every accessor raises :class:`DataFormatError` naming file, index and field; ``prefix`` is the
    field path of ``record`` inside its top-level record (``""`` for that).
    """

    def __init__(self, path: Union[str, Path], index: int, record: Mapping[str, Any],
                 prefix: str = "") -> None:
        self.path = Path(path)
        self.index = index
        self.record = record
        self.prefix = prefix

    def error(self, field_name: str, message: str) -> DataFormatError:
        """Build (not raise) a :class:`DataFormatError` for ``field_name`` of this record."""
        full = f"{self.prefix}.{field_name}" if self.prefix else field_name
        return DataFormatError(self.path, message, index=self.index, field_name=full)

    def has(self, field_name: str) -> bool:
        """Whether the (dotted) field exists."""
        return self._lookup(field_name, required=False) is not _MISSING

    def raw(self, field_name: str) -> Any:
        """The field's value, whatever its type (must exist)."""
        return self._lookup(field_name, required=True)

    def _typed(self, field_name: str, kind: type, what: str) -> Any:
        value = self.raw(field_name)
        if not isinstance(value, kind):
            raise self.error(field_name, f"expected {what}, got {type(value).__name__}")
        return value

    def text(self, field_name: str) -> str:
        """A non-empty string field (surrounding whitespace is kept)."""
        value = self._typed(field_name, str, "a string")
        if not value.strip():
            raise self.error(field_name, "expected a non-empty string")
        return value

    def text_list(self, field_name: str) -> List[str]:
        """A list of non-empty strings (may be empty)."""
        value = self._typed(field_name, list, "a list of strings")
        for position, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise self.error(f"{field_name}[{position}]", "expected a non-empty string")
        return list(value)

    def mapping(self, field_name: str) -> Mapping[str, Any]:
        """An object-valued field."""
        return self._typed(field_name, dict, "an object")

    def object_list(self, field_name: str) -> List["RecordReader"]:
        """A list of objects, each wrapped in a reader whose field names are prefixed."""
        value = self._typed(field_name, list, "a list of objects")
        readers = []
        for position, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.error(f"{field_name}[{position}]", "expected an object")
            nested = f"{field_name}[{position}]"
            prefix = f"{self.prefix}.{nested}" if self.prefix else nested
            readers.append(RecordReader(self.path, self.index, item, prefix))
        return readers

    def answer(self, field_name: str) -> str:
        """An answer given as a string or as a (possibly nested) list whose first item is used."""
        value = self.raw(field_name)
        path = field_name
        while isinstance(value, list):
            if not value:
                raise self.error(path, "expected a non-empty answer list")
            value, path = value[0], f"{path}[0]"
        if not isinstance(value, str) or not value.strip():
            raise self.error(path, "expected a non-empty answer string")
        return value.strip()

    def _lookup(self, field_name: str, required: bool) -> Any:
        value: Any = self.record
        walked: List[str] = []
        for part in field_name.split("."):
            walked.append(part)
            if not isinstance(value, dict) or part not in value:
                if required:
                    raise self.error(".".join(walked), "missing field")
                return _MISSING
            value = value[part]
        return value


def log_skipped(path: Union[str, Path], skipped: int, total: int, reason: str) -> None:
    """Log how many records of a file a loader skipped, and why (nothing when none)."""
    if skipped:
        logger.info("%s: skipped %d of %d records (%s)", path, skipped, total, reason)


def cases_from_records(path: Union[str, Path],
                       build: Callable[[RecordReader], Optional[UnlearnCase]]) -> List[UnlearnCase]:
    """``build(reader)`` of every record of a JSON file, in order; ``None`` (the record's subject is
    not verbatim in its prompt, so it cannot form a request) skips the record, counted in the log."""
    records = read_json_records(path)
    built = [build(RecordReader(path, index, record)) for index, record in enumerate(records)]
    cases = [case for case in built if case is not None]
    log_skipped(path, len(records) - len(cases), len(records), "subject not verbatim in prompt")
    return cases


def make_probe(prompt: str, answer: str) -> Probe:
    """A probe with surrounding whitespace removed from prompt and answer (some records carry
    stray spaces, e.g. ZsRE answers such as ``" species"``; scorers add exactly one space)."""
    return Probe(prompt=prompt.strip(), answer=answer.strip())


def make_request(prompt: str, subject: str, ground_truth: str) -> Dict[str, str]:
    """EasyEdit request dict with an empty ``target_new`` (the method's YAML decides it)."""
    return {"prompt": prompt.strip(), "subject": subject, "ground_truth": ground_truth.strip(),
            "target_new": ""}


def fact_case(case_id: str, subject: str, forget: Probe, paraphrase: Sequence[Probe],
              neighbour: Sequence[Probe], source: str, relation: Optional[str] = None) -> UnlearnCase:
    """A case forgetting one fact: the request is ``forget``'s prompt and answer (``subject`` in it)."""
    request = make_request(forget.prompt, subject, forget.answer)
    return UnlearnCase(case_id, request, [forget], list(paraphrase), list(neighbour), source,
                       relation=relation)
