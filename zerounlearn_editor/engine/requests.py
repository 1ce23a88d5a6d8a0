"""Validation of EasyEdit request dicts into :class:`ForgetRequest` objects.

An EasyEdit request is a dict with ``prompt`` (holding ``subject`` verbatim, or a ``{}``
placeholder for it), ``subject``, ``ground_truth`` (the answer to forget) and an optional
``target_new`` (the neutral target; empty means the method's configured one).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

LOG = logging.getLogger(__name__)

__all__ = ["RequestError", "ForgetRequest", "normalize_requests"]


class RequestError(ValueError):
    """A request is malformed; the message names the request index and the problem."""


@dataclass(frozen=True)
class ForgetRequest:
    """One fact to forget, with the prompt split around the subject.

    ``prompt == prefix + subject + suffix``; ``target`` is the neutral target text or
    ``None`` for the configured default; ``answer`` is ``None`` when the request names none
    (the edit does not use it; evaluation does).
    """

    index: int
    prefix: str
    subject: str
    suffix: str
    answer: Optional[str]
    target: Optional[str]

    @property
    def prompt(self) -> str:
        return self.prefix + self.subject + self.suffix


def _as_text(value: Any, index: int, field: str, allow_empty: bool = False) -> str:
    if isinstance(value, Mapping) and "str" in value:  # ROME-style {"str": ..., "id": ...}
        value = value["str"]
    if isinstance(value, (list, tuple)):
        if not value:
            raise RequestError(f"request {index}: field {field!r} is an empty list")
        if len(value) > 1:  # one request has one prompt / subject / answer / target: the rest would be dropped
            raise RequestError(f"request {index}: field {field!r} is a list of {len(value)} values, expected one string")
        value = value[0]
    if not isinstance(value, str):
        raise RequestError(f"request {index}: field {field!r} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise RequestError(f"request {index}: field {field!r} is empty")
    return value


def _subject_start(prompt: str, subject: str, index: int) -> int:
    """Start of the subject in the prompt: its first whole-word occurrence.

    A match inside a longer word (``"Rome"`` in ``"Romeo"``) is skipped; when the subject occurs
    only inside longer words, the first such occurrence is used with a warning. Later whole-word
    occurrences are ignored (logged).
    """
    left = r"(?<![^\W_])" if subject[:1].isalnum() else ""
    right = r"(?![^\W_])" if subject[-1:].isalnum() else ""
    matches = [m.start() for m in re.finditer(left + re.escape(subject) + right, prompt)]
    if matches:
        if len(matches) > 1:
            LOG.info("request %d: subject %r occurs %d times in its prompt; the first occurrence is edited",
                     index, subject, len(matches))
        return matches[0]
    start = prompt.index(subject)
    LOG.warning("request %d: subject %r occurs in prompt %r only inside a longer word; using that occurrence",
                index, subject, prompt)
    return start


def normalize_requests(requests: Sequence[Mapping[str, Any]], distinct_answers: bool = False) -> List[ForgetRequest]:
    """Check every request and split its prompt around the subject.

    Raises :class:`RequestError` for an empty list, a missing prompt, an empty field, or a
    subject that does not occur in its prompt. Nothing is modified.

    The subject is located at its first whole-word occurrence in the prompt (not inside a longer
    word: ``"Rome"`` in ``"Romeo"`` only if there is no other). A request repeating an earlier one
    (same prompt, subject and target) is dropped with a warning naming both indices; the same
    prompt and subject with different targets is an error. ``distinct_answers`` (answer-suppression
    targets, where the answer is what a request's residual pushes down): a repeat with another
    ``ground_truth`` is an error too, not dropped. ``ForgetRequest.index`` keeps the caller's index.

    Requests built by EasyEdit's ``normal_edit`` carry no ``subject`` and ``ground_truth=None``:
    a missing subject makes the whole prompt the subject (the key is read at the prompt's last
    token, with a warning), and a missing answer is allowed since the edit does not use it.
    An answer that is given must not be empty.
    """
    if isinstance(requests, Mapping):
        requests = [requests]
    if not requests:
        raise RequestError("no requests given: the request list is empty")
    out: List[ForgetRequest] = []
    seen: dict = {}
    for index, request in enumerate(requests):
        if not isinstance(request, Mapping):
            raise RequestError(f"request {index}: expected a dict, got {type(request).__name__}")
        if "prompt" not in request:
            raise RequestError(f"request {index}: missing field 'prompt'")
        prompt = _as_text(request["prompt"], index, "prompt")
        if request.get("subject") is None:
            LOG.warning("request %d has no subject: the whole prompt is used, key at its last token", index)
            subject = prompt
        else:
            subject = _as_text(request["subject"], index, "subject")
        raw_answer = request.get("ground_truth")
        answer = None if raw_answer is None else _as_text(raw_answer, index, "ground_truth")
        target_raw = request.get("target_new")
        target = None
        if target_raw is not None:
            target = _as_text(target_raw, index, "target_new", allow_empty=True)
            target = target if target.strip() else None
        if "{}" in prompt and subject not in prompt:
            start = prompt.index("{}")
            prefix, suffix = prompt[:start], prompt[start + 2 :]
        elif subject in prompt:
            start = _subject_start(prompt, subject, index)
            prefix, suffix = prompt[:start], prompt[start + len(subject) :]
        else:
            raise RequestError(f"request {index}: subject {subject!r} does not occur in prompt {prompt!r}")
        request_obj = ForgetRequest(index, prefix, subject, suffix, answer, target)
        key = (request_obj.prompt, len(prefix), subject)
        if key in seen:
            first = seen[key]
            if first.target != target:
                raise RequestError(
                    f"request {index}: same prompt and subject as request {first.index} but another target_new "
                    f"({target!r} vs {first.target!r}); one key cannot be sent to two targets"
                )
            if distinct_answers and first.answer != answer:
                raise RequestError(
                    f"request {index}: same prompt and subject as request {first.index} but another ground_truth "
                    f"({answer!r} vs {first.answer!r}); answer-suppression targets push one answer down per prompt: "
                    f"give one request per prompt"
                )
            LOG.warning("request %d repeats request %d (same prompt, subject and target): dropped", index, first.index)
            continue
        seen[key] = request_obj
        out.append(request_obj)
    return out
