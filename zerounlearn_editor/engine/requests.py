"""Validation of EasyEdit request dicts into :class:`ForgetRequest` objects.

An EasyEdit request is a dict with ``prompt`` (holding ``subject`` verbatim, or a ``{}``
placeholder for it), ``subject``, ``ground_truth`` (the answer to forget) and an optional
``target_new`` (the neutral target; empty means the method's configured one).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Collection, List, Mapping, Optional, Sequence, Tuple

LOG = logging.getLogger(__name__)


class RequestError(ValueError):
    """A request is malformed; the message names the request index and the problem."""


@dataclass(frozen=True)
class ForgetRequest:
    """One fact to forget: ``prompt == prefix + subject + suffix``; ``target`` the neutral target text
    (``None``: the configured one); ``answer`` ``None`` when the request names none."""

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
            raise RequestError(
                f"request {index}: field {field!r} is a list of {len(value)} values, expected one string"
            )
        value = value[0]
    if not isinstance(value, str):
        raise RequestError(f"request {index}: field {field!r} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise RequestError(f"request {index}: field {field!r} is empty")
    return value


def _subject_start(prompt: str, subject: str, index: int) -> int:
    """Start of the subject's first whole-word occurrence in the prompt (``"Rome"`` in ``"Romeo"`` only, with
    a warning, when there is no other)."""
    left = r"(?<![^\W_])" if subject[:1].isalnum() else ""
    right = r"(?![^\W_])" if subject[-1:].isalnum() else ""
    matches = [m.start() for m in re.finditer(left + re.escape(subject) + right, prompt)]
    if matches:
        if len(matches) > 1:
            LOG.info("request %d: subject %r occurs %d times in its prompt; the first occurrence is edited",
                     index, subject, len(matches))
        return matches[0]
    LOG.warning("request %d: subject %r occurs in prompt %r only inside a longer word; using that occurrence",
                index, subject, prompt)
    return prompt.index(subject)


def normalize_requests(requests: Sequence[Mapping[str, Any]], distinct_answers: bool = False) -> List[ForgetRequest]:
    """Check every request and split its prompt around the subject (raises :class:`RequestError`).

    A repeated request (same prompt, subject and target) is dropped with a warning; the same prompt and
    subject with another target (or, with ``distinct_answers``, another ``ground_truth``) is an error. A
    missing subject (EasyEdit's ``normal_edit``) makes the whole prompt the subject; a missing answer is
    allowed. ``ForgetRequest.index`` keeps the caller's index.
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
        target = request.get("target_new")
        if target is not None:
            target = _as_text(target, index, "target_new", allow_empty=True)
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


@dataclass(frozen=True)
class CheckedRequests:
    """Requests checked once by :func:`check_requests` (:func:`normalize_requests`), passed inward in place of the
    request dicts so no later stage checks them again: ``requests`` the checked requests, ``distinct_answers``
    whether one answer per prompt was required (answer-suppression targets)."""

    requests: Tuple[ForgetRequest, ...]
    distinct_answers: bool = False


def check_requests(requests: Sequence[Mapping[str, Any]], distinct_answers: bool = False) -> CheckedRequests:
    """:func:`normalize_requests` once, as a :class:`CheckedRequests` (raises :class:`RequestError`)."""
    return CheckedRequests(tuple(normalize_requests(requests, distinct_answers)), distinct_answers)


def target_repeats_answer(target: str, answer: str) -> bool:
    """Whether the neutral ``target`` equals or begins with ``answer`` (surrounding whitespace and case ignored):
    optimising toward such a target teaches the fact instead of removing it (``" Paris"`` for ``"Paris"``)."""
    target, answer = target.strip().casefold(), answer.strip().casefold()
    return bool(answer) and target.startswith(answer)


def check_targets_not_answers(forget: Sequence[ForgetRequest], neutral_target: Optional[str],
                              special_tokens: Collection[str] = ()) -> None:
    """Refuse (:class:`RequestError`, naming the request) a request whose neutral target -- its ``target_new``, else
    the hparams' ``neutral_target`` -- equals or begins with its answer (:func:`target_repeats_answer`). Requests
    without an answer, and answers or targets that are a special token (EasyEdit fills in EOS), are not checked."""
    for request in forget:
        target = request.target or neutral_target
        if request.answer is None or target is None:
            continue
        if request.answer.strip() in special_tokens or target.strip() in special_tokens:
            continue
        if target_repeats_answer(target, request.answer):
            if request.target:
                where, fix = "its field 'target_new'", "give a target_new that does not start with the answer, or none"
            else:
                where, fix = (
                    "the hparams' key 'neutral_target'",
                    "set a neutral_target that does not start with the answer",
                )
            raise RequestError(
                f"request {request.index}: the neutral target {target!r} ({where}) is or begins with the answer "
                f"{request.answer!r} to forget, so the edit would teach the fact instead of removing it; {fix}"
            )
