"""Lists of small records (facts to forget, facts to keep) read from JSON, JSONL or YAML files.

A file holds a list of mappings (``[{"prompt": "The capital of France is", "subject": "France"}]``):
one JSON list (``.json``), one JSON object per non-empty line (``.jsonl``) or one YAML list read with
a ``yaml.SafeLoader`` (``.yaml`` / ``.yml``). A key given twice in one record is an error in every
format. Every error is a :class:`RecordFileError` naming the file and, where known, the record
index (0-based) and the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence, Union


from zerounlearn_editor.data.types import record_location
from zerounlearn_editor.support.structured_files import read_structured

_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml")


class RecordFileError(ValueError):
    """A record file is missing, unreadable or malformed (message names file, record and field)."""


def read_record_list(path: Union[str, Path], what: str = "records") -> List[Dict[str, Any]]:
    """The non-empty list of mappings stored in ``path``; ``what`` names the content in error messages."""
    path = Path(path)
    if path.suffix.lower() not in _SUFFIXES:
        raise RecordFileError(f"{path}: {what} file must end in {', '.join(_SUFFIXES)}")
    if not path.is_file():
        raise RecordFileError(f"{what} file not found: {path}")
    records = read_structured(path, what, lambda message: RecordFileError(f"{path}: {message}"))
    if not isinstance(records, list):
        raise RecordFileError(f"{path}: expected a list of {what}, got {type(records).__name__}")
    if not records:
        raise RecordFileError(f"{path}: the list of {what} is empty")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            where = record_location(path, index)
            raise RecordFileError(f"{where}: expected a mapping, got {type(record).__name__}")
    return records


def require_fields(
    records: Sequence[Dict[str, Any]], fields: Sequence[str], source: Union[str, Path] = "<records>"
) -> None:
    """Check every record has a non-empty string in each of ``fields``; name the first offender."""
    for index, record in enumerate(records):
        for name in fields:
            value = record.get(name)
            if not isinstance(value, str) or not value.strip():
                problem = "missing" if name not in record else f"must be a non-empty string, got {value!r}"
                raise RecordFileError(f"{record_location(Path(str(source)), index, name)}: {problem}")
