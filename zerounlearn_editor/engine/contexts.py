"""Random-prefix context templates: short prefixes sampled from the model itself (seeded), cached on the model
object (attribute ``_zerounlearn_context_cache``); keys are averaged over the bare prompt and them.
With ``fewshot_contexts`` also few-shot prefixes of the package's hand-written facts (:func:`fewshot_prefixes`)."""
from __future__ import annotations

import inspect
import logging
import random
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.support.model_access import model_device

if TYPE_CHECKING:
    from zerounlearn_editor.engine.requests import ForgetRequest

LOG = logging.getLogger(__name__)

_STARTERS = ("The", "Therefore", "Because", "I", "You", "In", "When", "It", "However", "This")
_CACHE_ATTR = "_zerounlearn_context_cache"


def _forward_names(model: nn.Module) -> Tuple[Optional[str], Optional[str]]:
    """The names ``model.forward`` gives its KV-cache argument (transformers 5: ``cache``, 4.x:
    ``past_key_values``) and its keep-only-the-last-logits argument (``logits_to_keep``, ``num_logits_to_keep``
    in 4.4x); ``None`` where it takes none."""
    params = inspect.signature(model.forward).parameters
    cache = next((name for name in ("cache", "past_key_values") if name in params), None)
    keep = next((name for name in ("logits_to_keep", "num_logits_to_keep") if name in params), None)
    return cache, keep


class _LastLogits:
    """The logits ``[vocab]`` at the last position of a growing sequence: the first call runs the whole prefix
    and keeps the model's KV cache, each later call runs the new token alone on it; logits at the last position
    only where the forward can skip the others. A model that takes or returns no cache gets a full forward of
    the sequence per call (the same logits up to float rounding)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.device = model_device(model)
        self.cache_name, self.keep_name = _forward_names(model)
        self.cache = None
        self.seen = 0  # tokens the cache holds

    def __call__(self, ids: List[int]) -> torch.Tensor:
        kwargs: Dict[str, object] = {self.keep_name: 1} if self.keep_name else {}
        new = ids
        if self.cache_name is not None:
            kwargs["use_cache"] = True
            if self.cache is not None:
                kwargs[self.cache_name], new = self.cache, ids[self.seen:]
        out = self.model(input_ids=torch.tensor([new], device=self.device), **kwargs)
        cache = getattr(out, "cache", None)
        cache = getattr(out, "past_key_values", None) if cache is None else cache
        if self.cache_name is not None and cache is None:
            LOG.debug("%s returned no cache: context prefixes by full forwards", type(self.model).__name__)
            self.cache_name = None  # full forwards from now on
        self.cache, self.seen = cache, len(ids)
        return out.logits[0, -1]


class _FullLogits:
    """The logits ``[vocab]`` at the last position by a full forward of the whole sequence, no cache (the sampler
    before issue 48; :func:`sample_prefixes` with ``cached=False``, the reference its cached path must equal)."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.device = model, model_device(model)

    def __call__(self, ids: List[int]) -> torch.Tensor:
        return self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=False).logits[0, -1]


@torch.no_grad()
def _sample_continuation(last_logits, tok, starter: str, length: int, generator: torch.Generator) -> str:
    """``starter`` and ``length`` tokens sampled after it (top 5, renormalised, ``generator``; no special token),
    decoded; ``last_logits(ids)`` gives the next token's logits ``[vocab]`` (:class:`_LastLogits`: one forward of
    the starter, then one token per step on the model's KV cache)."""
    ids = list(tok(starter)["input_ids"])
    special = {t for t in (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) if t is not None}
    for _ in range(length):
        logits = last_logits(ids).float().cpu()
        for token in special:
            logits[token] = -float("inf")
        top = torch.topk(logits, k=5)
        probs = torch.softmax(top.values, dim=-1)
        choice = torch.multinomial(probs, 1, generator=generator).item()
        ids.append(int(top.indices[choice]))
    return tok.decode(ids, skip_special_tokens=True)


def sample_prefixes(model: nn.Module, tok, count: int, length: int, seed: int, cached: bool = True) -> List[str]:
    """``[""]`` plus ``count`` freshly sampled prefixes (not read from or written to the model's prefix cache);
    ``cached=False``: each token by a full forward of the sequence (same tokens, slower; the reference)."""
    generator = torch.Generator().manual_seed(seed)
    prefixes = [""]
    with eval_mode(model):
        for i in range(count):
            logits = _LastLogits(model) if cached else _FullLogits(model)
            text = _sample_continuation(logits, tok, _STARTERS[i % len(_STARTERS)], length, generator)
            prefixes.append(" ".join(text.replace("{", " ").replace("}", " ").split()) + ". ")
    return prefixes


CONTEXT_SEED = 0
"""Seed of the sampled context prefixes of every edit."""


def context_prefixes(model: nn.Module, tok, count: int, length: int, seed: int = 0) -> List[str]:
    """``[""]`` (the bare prompt) plus ``count`` sampled prefixes like ``"The city was built in. "``."""
    cache: Dict[Tuple[int, int, int], List[str]] = model.__dict__.setdefault(_CACHE_ATTR, {})
    key = (count, length, seed)
    if key not in cache:
        prefixes = sample_prefixes(model, tok, count, length, seed)
        LOG.debug("context prefixes: %s", prefixes)
        cache[key] = prefixes
    return list(cache[key])


def cached_context_prefixes(model: nn.Module) -> List[Dict[str, object]]:
    """The prefixes cached on ``model``: ``[{"count", "length", "seed", "prefixes"}]`` (JSON-able), so a later
    process can edit with the same ones (:func:`restore_context_prefixes`)."""
    cache = model.__dict__.get(_CACHE_ATTR, {})
    return [{"count": c, "length": l, "seed": s, "prefixes": list(p)} for (c, l, s), p in sorted(cache.items())]


def restore_context_prefixes(model: nn.Module, entries: Sequence[Mapping[str, object]]) -> None:
    """Cache ``entries`` (from :func:`cached_context_prefixes`) on ``model``: its edits use those prefixes, as the
    edits of one process all use the prefixes sampled before its first edit."""
    cache: Dict[Tuple[int, int, int], List[str]] = model.__dict__.setdefault(_CACHE_ATTR, {})
    for entry in entries:
        prefixes = entry["prefixes"]
        if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes):
            raise ValueError(f"context prefixes must be a list of strings, got {prefixes!r}")
        cache[(int(entry["count"]), int(entry["length"]), int(entry["seed"]))] = list(prefixes)


def clear_context_prefixes(model: nn.Module) -> None:
    """Forget the prefixes cached on ``model`` (the next :func:`context_prefixes` samples again)."""
    model.__dict__.pop(_CACHE_ATTR, None)


FEWSHOT_SHOTS = 3
"""Hand-written facts per few-shot prefix."""


def _fewshot_pool(requests: Sequence["ForgetRequest"]) -> List[Tuple[str, str]]:
    """The built-in ``(prompt, answer)`` facts :func:`fewshot_prefixes` may use with these forget requests."""
    named = [text.lower() for r in requests for text in (r.prompt, r.subject, r.answer or "") if text]
    words = [text.lower() for r in requests for text in (r.subject, r.answer or "") if text.strip()]
    return [(p, a) for p, s, a in CAPITALS_TO_FORGET + OTHER_CAPITALS + UNRELATED_FACTS
            if not any(s.lower() in text or a.lower() in text for text in named)
            and not any(word in f"{p} {a}".lower() for word in words)]


def check_fewshot_facts(requests: Sequence["ForgetRequest"], count: int, shots: int = FEWSHOT_SHOTS) -> None:
    """Raise :class:`~zerounlearn_editor.engine.requests.RequestError` when ``fewshot_contexts: count`` cannot be
    built for one edit of ``requests`` (fewer than ``shots`` built-in facts left; pure, no model needed).

    The message names the requests that rule out the most built-in facts (a short subject such as ``"a"``
    occurs in every fact's text) and the fixes. ``count`` 0: nothing to check."""
    from zerounlearn_editor.engine.requests import RequestError

    if not count or len(_fewshot_pool(requests)) >= shots:
        return
    total = len(CAPITALS_TO_FORGET + OTHER_CAPITALS + UNRELATED_FACTS)
    left = len(_fewshot_pool(requests))
    ruled_out = sorted(((total - len(_fewshot_pool([r])), r) for r in requests), key=lambda pair: -pair[0])
    # the requests that alone rule out a quarter of the facts (else the three that rule out the most)
    shown = [(n, r) for n, r in ruled_out if n >= total / 4][:5] or [(n, r) for n, r in ruled_out[:3] if n > 0]
    worst = [f"request {r.index} (subject {r.subject!r}, answer {r.answer!r}) rules out {n}" for n, r in shown]
    raise RequestError(
        f"fewshot_contexts: only {left} of the {total} built-in few-shot facts name no forgotten subject "
        f"or answer, {shots} are needed; {'; '.join(worst) or 'the requests together rule them out'}. "
        "Give those facts their full subject and answer, edit them in another call, or use a YAML without "
        "fewshot_contexts (the non-deep YAML)"
    )


def fewshot_prefixes(requests: Sequence["ForgetRequest"], count: int, shots: int = FEWSHOT_SHOTS) -> List[str]:
    """``count`` prefixes of ``shots`` hand-written facts each, ``"{prompt} {answer}.\n"`` per fact.

    ``requests`` (:class:`~zerounlearn_editor.engine.requests.ForgetRequest`) are the edit's forget requests: a fact
    is never used when its subject or answer occurs in any of their prompts, subjects or answers, or when any of
    their subjects or answers occurs in the fact's text (case-insensitive). The guarantee holds per edit call:
    facts forgotten by an earlier call may appear. Consecutive prefixes take consecutive facts of one fixed shuffle
    of the rest. Too few facts left: :func:`check_fewshot_facts`'s error."""
    check_fewshot_facts(requests, count, shots)
    pool = _fewshot_pool(requests)
    random.Random(0).shuffle(pool)  # fixed order that mixes the relations
    return ["".join(f"{p} {a}.\n" for p, a in (pool[(i * shots + j) % len(pool)] for j in range(shots)))
            for i in range(count)]
