"""Retain sets: facts the edit must keep, requests ``{"prompt", "subject"}`` (answers ignored) whose keys are
read like forget keys. Sources, first match wins: the apply functions' ``retain=`` keyword, else the YAML's
``retain_file`` (a JSON, JSONL or YAML list)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Union

from zerounlearn_editor.data.record_files import read_record_list, require_fields
from zerounlearn_editor.engine.requests import CheckedRequests, ForgetRequest, RequestError, normalize_requests

LOG = logging.getLogger(__name__)

RetainSpec = Union[None, str, Path, Sequence[Mapping[str, Any]], CheckedRequests]
"""A retain set: ``None``, a file path, a list of request dicts, or retain requests already checked
(:func:`check_retain_records`)."""


def normalize_retain(retain: Sequence[Mapping[str, Any]]) -> List[ForgetRequest]:
    """Validate retain request dicts (errors name ``retain request <index>``); ``target_new`` is refused."""
    if isinstance(retain, Mapping):
        retain = [retain]
    if not retain:
        return []
    for index, request in enumerate(retain):
        if isinstance(request, Mapping) and str(request.get("target_new") or "").strip():
            raise RequestError(f"retain request {index}: field 'target_new' makes no sense for a fact to keep")
    stripped = [{k: v for k, v in r.items() if k not in ("ground_truth", "answer", "target_new")}
                if isinstance(r, Mapping) else r for r in retain]
    try:
        return normalize_requests(stripped)
    except RequestError as exc:
        raise RequestError(f"retain {exc}") from None


def load_retain_file(path: Union[str, Path]) -> List[ForgetRequest]:
    """Retain requests from a JSON / JSONL / YAML list of ``{"prompt", "subject"}`` mappings."""
    return list(check_retain_records(read_record_list(path, what="retain facts"), path).requests)


def check_retain_records(records: Sequence[Mapping[str, Any]], path: Union[str, Path]) -> CheckedRequests:
    """The retain file ``path``'s records (read once by the caller) checked once (errors name the file)."""
    require_fields(records, ("prompt", "subject"), path)
    try:
        return CheckedRequests(tuple(normalize_retain(records)))
    except RequestError as exc:
        raise RequestError(f"{path}: {exc}") from None


def resolve_retain(retain: RetainSpec, retain_file: Optional[str]) -> List[ForgetRequest]:
    """The retain requests of an edit: the ``retain`` argument, else ``retain_file``, else none."""
    if retain is not None:
        if retain_file:
            LOG.info("retain set given as an argument; the YAML's retain_file %s is not used", retain_file)
        if isinstance(retain, (str, Path)):
            return load_retain_file(retain)
        if isinstance(retain, CheckedRequests):  # checked once where it was read
            return list(retain.requests)
        return normalize_retain(retain)
    if retain_file:
        return load_retain_file(retain_file)
    return []


def check_retain_disjoint(forget: Sequence[ForgetRequest], keep: Sequence[ForgetRequest]) -> None:
    """Refuse a retain request whose prompt (whitespace-normalised) is also a forget prompt."""
    forgotten = {" ".join(r.prompt.split()): r.index for r in forget}
    for request in keep:
        index = forgotten.get(" ".join(request.prompt.split()))
        if index is not None:
            raise RequestError(
                f"retain request {request.index}: prompt {request.prompt!r} is also forget request {index}; a fact "
                f"cannot be forgotten and kept by one edit: drop it from the retain set"
            )
