"""Retain sets: facts the edit must keep, given as requests without answers.

A retain request is ``{"prompt": ..., "subject": ...}`` (``ground_truth`` / ``answer`` may be
present and are ignored by the edit). Its key ``k_r`` is read exactly like a forget key (at the
subject's last token, averaged over the context prefixes); the retain-aware solves protect
these keys (ZeroUnlearn-GD) or their values ``m_r = W k_r`` (ZeroUnlearn).

Sources, first match wins: the ``retain=`` keyword of ``apply_zerounlearn_to_model`` /
``apply_zerounlearn_gd_to_model``, else the YAML's ``retain_file`` (a JSON, JSONL or YAML list;
a relative path is resolved against the YAML file's folder when loaded with ``from_hparams``).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Union

from zerounlearn_editor.data.record_files import read_record_list, require_fields
from zerounlearn_editor.engine.requests import ForgetRequest, RequestError, normalize_requests

__all__ = ["RetainSpec", "normalize_retain", "load_retain_file", "resolve_retain", "check_retain_disjoint"]

LOG = logging.getLogger(__name__)

RetainSpec = Union[None, str, Path, Sequence[Mapping[str, Any]]]
"""A retain set: ``None``, a file path, or a list of request dicts."""


def normalize_retain(retain: Sequence[Mapping[str, Any]]) -> List[ForgetRequest]:
    """Validate retain request dicts; errors name ``retain request <index>``.

    An empty list is allowed (no retain set). Answers are not needed; a given ``target_new`` is
    meaningless for a fact to keep and is rejected.
    """
    if isinstance(retain, Mapping):
        retain = [retain]
    if not retain:
        return []
    for index, request in enumerate(retain):
        if isinstance(request, Mapping) and str(request.get("target_new") or "").strip():
            raise RequestError(f"retain request {index}: field 'target_new' makes no sense for a fact to keep")
    try:
        normalized = normalize_requests([_without_answer(r) for r in retain])
    except RequestError as exc:
        raise RequestError(f"retain {exc}") from None
    return normalized


def _without_answer(request: Any) -> Any:
    if not isinstance(request, Mapping):
        return request
    return {k: v for k, v in request.items() if k not in ("ground_truth", "answer", "target_new")}


def load_retain_file(path: Union[str, Path]) -> List[ForgetRequest]:
    """Retain requests from a JSON / JSONL / YAML list of ``{"prompt", "subject"}`` mappings."""
    records = read_record_list(path, what="retain facts")
    require_fields(records, ("prompt", "subject"), path)
    try:
        return normalize_retain(records)
    except RequestError as exc:
        raise RequestError(f"{path}: {exc}") from None


def resolve_retain(retain: RetainSpec, retain_file: Optional[str]) -> List[ForgetRequest]:
    """The retain requests of an edit: the ``retain`` argument, else ``retain_file``, else none."""
    if retain is not None:
        if retain_file:
            LOG.info("retain set given as an argument; the YAML's retain_file %s is not used", retain_file)
        if isinstance(retain, (str, Path)):
            return load_retain_file(retain)
        return normalize_retain(retain)
    if retain_file:
        return load_retain_file(retain_file)
    return []


def check_retain_disjoint(forget: Sequence[ForgetRequest], keep: Sequence[ForgetRequest]) -> None:
    """Refuse a retain request whose prompt is also a forget prompt (whitespace-normalised).

    Such an edit is asked to send one key to the neutral target and to keep it: a contradiction
    that no weight satisfies. The error names both indices.
    """
    forgotten = {" ".join(r.prompt.split()): r.index for r in forget}
    for request in keep:
        index = forgotten.get(" ".join(request.prompt.split()))
        if index is not None:
            raise RequestError(
                f"retain request {request.index}: prompt {request.prompt!r} is also forget request {index}; a fact "
                f"cannot be forgotten and kept by one edit: drop it from the retain set"
            )
