"""Completion requests (experimental ``completion_requests``): one extra forget request per answer position the
unedited model completes, so the edit also acts where a multi-token answer's later tokens are predicted.

For a request whose answer is ``a_1..a_T`` (teacher-forced on the bare prompt, the benchmarks' tokenisation) and
which the unedited model knows (argmax token accuracy >= ``min_accuracy``), every ``j`` in ``1..T-1`` where the
argmax after ``prompt + a_1..a_j`` is ``a_{j+1}`` gives a request with prompt ``prompt + a_1..a_j``, lookup token
``a_j`` (the "subject" is the answer's first ``j`` tokens) and target ids ``a_{j+1}..a_T``: its key is the MLP
input at ``a_j`` and its neutral target makes the rest of the answer unlikely there. The whole-answer request
still handles ``a_1``.

Expansion is request-major (each request, then its completion requests), so the expansion of a list is the
concatenation of the expansions of its chunks (the benchmarks optimise targets chunk by chunk).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.requests import ForgetRequest

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompletionSite:
    """One completed answer position of request ``request`` (its place in the list): the answer's first
    ``length`` tokens ``prefix_ids`` are given, ``rest_ids`` (``a_{length+1}..a_T``) are what to suppress."""

    request: int
    length: int
    prefix_ids: Tuple[int, ...]
    rest_ids: Tuple[int, ...]


def completion_sites(answer_ids: Sequence[Sequence[int]], predicted_ids: Sequence[Sequence[int]],
                     min_accuracy: float) -> List[CompletionSite]:
    """The positions to add, from each request's answer tokens ``answer_ids[i]`` ``[T_i]`` and the unedited
    model's teacher-forced argmax ``predicted_ids[i]`` ``[T_i]`` (``predicted_ids[i][t]`` predicts
    ``answer_ids[i][t]``): for the requests with token accuracy >= ``min_accuracy``, every ``t >= 1`` with
    ``predicted_ids[i][t] == answer_ids[i][t]``. Pure: no model."""
    sites: List[CompletionSite] = []
    for i, (answer, predicted) in enumerate(zip(answer_ids, predicted_ids)):
        if len(answer) != len(predicted):
            raise ValueError(f"request {i}: {len(answer)} answer tokens but {len(predicted)} predictions")
        if len(answer) < 2:
            continue
        hits = [int(a) == int(p) for a, p in zip(answer, predicted)]
        if sum(hits) < min_accuracy * len(hits):
            continue
        for t in range(1, len(answer)):
            if hits[t]:
                sites.append(CompletionSite(i, t, tuple(int(a) for a in answer[:t]), tuple(int(a) for a in answer[t:])))
    return sites


def _answer_prefix_text(tok, prompt: str, ids: Sequence[int], prefix_ids: Sequence[int]):
    """The text ``t`` of the answer tokens ``prefix_ids`` such that ``prompt + t`` tokenises to ``ids`` (the
    decoded tokens, with or without a leading space, as the tokenizer's decoder writes them); None if neither does."""
    decoded = tok.decode(list(prefix_ids))
    for text in (decoded, " " + decoded):
        if list(tok(prompt + text)["input_ids"]) == list(ids):
            return text
    return None


def expand_with_completions(
    model: nn.Module, tok, forget: Sequence[ForgetRequest], target_ids: Sequence[Sequence[int]],
    min_accuracy: float, batch_size: int = 32,
) -> Tuple[List[ForgetRequest], List[List[int]]]:
    """``forget`` and ``target_ids`` with each request's completion requests after it (see the module
    docstring); requests without an answer, and sites whose text does not re-tokenise to ``prompt + a_1..a_j``,
    add none. The completion requests keep their request's ``index`` and have no ``answer`` (their target ids are
    given). One teacher-forced pass of the bare prompts (model unchanged)."""
    from zerounlearn_editor.data.types import Probe
    from zerounlearn_editor.evaluation.batching import encode_probe
    from zerounlearn_editor.evaluation.metrics import answer_argmax_ids

    scored = [i for i, r in enumerate(forget) if r.answer is not None and r.answer.strip()]
    probes = [Probe(forget[i].prompt, forget[i].answer) for i in scored]
    with eval_mode(model), torch.no_grad():
        predicted = answer_argmax_ids(model, tok, probes, batch_size)
    encoded = {i: encode_probe(tok, probe) for i, probe in zip(scored, probes)}
    answers = [encoded[i].input_ids[encoded[i].answer_start:] for i in scored]
    by_request: dict = {}
    for site in completion_sites(answers, predicted, min_accuracy):
        by_request.setdefault(scored[site.request], []).append(site)
    out_forget: List[ForgetRequest] = []
    out_ids: List[List[int]] = []
    skipped = 0
    for i, request in enumerate(forget):
        out_forget.append(request)
        out_ids.append(list(target_ids[i]))
        for site in by_request.get(i, []):
            item = encoded[i]
            given = _answer_prefix_text(tok, request.prompt, item.input_ids[:item.answer_start + site.length],
                                        site.prefix_ids)
            if given is None:
                skipped += 1
                continue
            out_forget.append(ForgetRequest(request.index, request.prompt, given, "", None, None))
            out_ids.append(list(site.rest_ids))
    LOG.info("completion requests: %d added for %d request(s)%s", len(out_forget) - len(forget), len(forget),
             f" ({skipped} skipped: their text re-tokenises differently)" if skipped else "")
    return out_forget, out_ids


def completion_neighbours(forget: Sequence[ForgetRequest], expanded: Sequence[ForgetRequest],
                          subjects: int = 1) -> List[ForgetRequest]:
    """Keep rows for the completion requests in ``expanded`` (experimental ``completion_neighbours``): per
    completion request (answer prefix ``A`` after request ``r``'s prompt) the same ``A`` after ``r``'s prompt with
    each of the next ``subjects`` requests' subjects in ``forget`` (same-relation neighbours; the next ones whose
    subject and answer differ, cyclically) and ``A`` at the start of a text (a name that begins with the answer).
    ``expanded`` is :func:`expand_with_completions`' list: ``forget``'s own objects, each followed by its completion
    requests.
    Their keys join the retain keys, so the edit of ``A``'s completion is kept to what the forgotten fact's context
    adds."""
    whole = [r for r in forget if r.answer is not None]
    place = {id(r): k for k, r in enumerate(whole)}
    callers = {id(r) for r in forget}
    keep: List[ForgetRequest] = []
    source_at: Optional[int] = None  # expansion is request-major: a completion request follows its request
    for request in expanded:
        if id(request) in callers:
            source_at = place.get(id(request))
            continue
        if source_at is None:
            continue
        source, taken = whole[source_at], 0
        for step in range(1, len(whole)):
            if taken == subjects:
                break
            other = whole[(source_at + step) % len(whole)]
            if other.subject != source.subject and other.answer != source.answer:
                keep.append(ForgetRequest(request.index, source.prefix + other.subject + source.suffix,
                                          request.subject, "", None, None))
                taken += 1
        keep.append(ForgetRequest(request.index, "", request.subject.lstrip(), "", None, None))
    return keep
