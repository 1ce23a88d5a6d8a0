"""Deep-forgetting research levers: forget keys read in several real contexts (opt-in).

The paper reads one key per fact, at the subject's last token of the bare prompt (averaged over a
few random prefixes), and optimises one target state for it. The robustness audit finds the answer
back when the same fact is asked after a few in-context examples, as a question or in the chat
template: there the subject's key differs from the bare prompt's. With ``experimental:
forget_contexts`` each fact is also edited in those contexts, **as separate requests** (its own
key column in ``K_f`` ``[d_in, n (1 + v)]`` and its own target state), so the solve maps every
context's key to a state that does not say the answer.

The contexts are written here, in wordings the audit does not use, so the audit's probes stay held
out: ``in_context`` prefixes ``in_context_shots`` facts of :data:`DEMONSTRATIONS` (the package's
hand-written facts, never one naming a forgotten subject or answer), drawn per fact and seeded;
``question`` is ``"Question: {prompt}? Answer:"``; ``chat`` the tokenizer's chat template with the
user saying ``"Finish this sentence: {prompt}"`` and the assistant's turn opened with the prompt
(the key is read at the subject there, right before the answer).
"""
from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS, Fact
from .requests import ForgetRequest

__all__ = ["CONTEXT_KINDS", "DEMONSTRATIONS", "ExperimentalSettings", "expand_requests", "in_context", "as_question", "in_chat"]

LOG = logging.getLogger(__name__)

CONTEXT_KINDS = ("in_context", "question", "chat")
"""The contexts a fact can be edited in besides its bare prompt."""

DEMONSTRATIONS: Tuple[Fact, ...] = tuple(OTHER_CAPITALS + UNRELATED_FACTS + CAPITALS_TO_FORGET)
"""In-context demonstrations ``(prompt, subject, answer)`` (facts SmolLM2 knows; :mod:`.facts`)."""


@dataclass(frozen=True)
class ExperimentalSettings:
    """The ``experimental:`` mapping of an edit YAML (every key optional; the defaults = the paper).

    Attributes:
        forget_contexts: kinds of :data:`CONTEXT_KINDS` each fact is also edited in.
        in_context_shots: demonstrations before the prompt in an ``in_context`` request.
        in_context_draws: ``in_context`` requests per fact (each with its own demonstrations).
        demonstration_seed: seed of the demonstration draws.
    """

    forget_contexts: Tuple[str, ...] = ()
    in_context_shots: int = 3
    in_context_draws: int = 1
    demonstration_seed: int = 0

    @classmethod
    def from_mapping(cls, mapping: Any) -> "ExperimentalSettings":
        """Strictly parse the mapping; ``ValueError`` names the bad key."""
        if mapping is None:
            return cls()
        if not isinstance(mapping, Mapping):
            raise ValueError(f"expected a mapping, got {type(mapping).__name__}")
        known = {"forget_contexts", "in_context_shots", "in_context_draws", "demonstration_seed"}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; known: {sorted(known)}")
        contexts = mapping.get("forget_contexts", [])
        if not isinstance(contexts, (list, tuple)) or not all(isinstance(c, str) for c in contexts):
            raise ValueError(f"'forget_contexts' must be a list of {list(CONTEXT_KINDS)}, got {contexts!r}")
        bad = [c for c in contexts if c not in CONTEXT_KINDS]
        if bad or len(set(contexts)) != len(contexts):
            raise ValueError(f"'forget_contexts' must list distinct kinds of {list(CONTEXT_KINDS)}, got {list(contexts)}")
        values: Dict[str, int] = {}
        for key, low in (("in_context_shots", 1), ("in_context_draws", 1), ("demonstration_seed", 0)):
            value = mapping.get(key, getattr(cls, key))
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{key!r} must be an integer >= {low}, got {value!r}")
            values[key] = value
        return cls(forget_contexts=tuple(contexts), **values)

    @property
    def is_paper(self) -> bool:
        """No lever on: the edit is the paper's."""
        return not self.forget_contexts


def _forbidden_words(forget: Sequence[ForgetRequest]) -> Tuple[str, ...]:
    words = {w.strip().lower() for r in forget for w in (r.subject, r.answer or "") if w.strip()}
    return tuple(sorted(words))


def _demonstrations(forbidden: Sequence[str], shots: int, seed: int, index: int, draw: int) -> List[Fact]:
    allowed = [f for f in DEMONSTRATIONS if not any(w in f"{f[0]} {f[2]}".lower() for w in forbidden)]
    rng = random.Random(f"{seed}:{index}:{draw}")
    rng.shuffle(allowed)
    return allowed[:shots]


def in_context(request: ForgetRequest, demonstrations: Sequence[Fact]) -> ForgetRequest:
    """``request`` after ``"{p1} {a1}.\n..."`` (the subject's position moves with it)."""
    text = "".join(f"{p.strip()} {a.strip()}.\n" for p, _, a in demonstrations)
    return dataclasses.replace(request, prefix=text + request.prefix)


def as_question(request: ForgetRequest) -> ForgetRequest:
    """``"Question: {prompt}? Answer:"``."""
    return dataclasses.replace(request, prefix="Question: " + request.prefix, suffix=request.suffix + "? Answer:")


def in_chat(request: ForgetRequest, tok: Any) -> Optional[ForgetRequest]:
    """The chat template, the user saying ``"Finish this sentence: {prompt}"``, the assistant's turn
    opened with the prompt; the key is read at the subject in the assistant's turn. ``None``
    without a chat template."""
    if not getattr(tok, "chat_template", None):
        return None
    text = tok.apply_chat_template([{"role": "user", "content": f"Finish this sentence: {request.prompt}"}],
                                   tokenize=False, add_generation_prompt=True)
    return dataclasses.replace(request, prefix=text + request.prefix)


def expand_requests(forget: Sequence[ForgetRequest], settings: ExperimentalSettings, tok: Any) -> List[ForgetRequest]:
    """The checked requests followed by each one written in every context of ``settings.forget_contexts``.

    Returns ``forget`` unchanged when no lever is on. A copy keeps its request's index, subject,
    answer and target; only the text around the subject changes. ``chat`` without a chat template
    is left out with a warning.
    """
    out = list(forget)
    if settings.is_paper:
        return out
    forbidden = _forbidden_words(forget)
    for kind in settings.forget_contexts:
        if kind == "chat" and not getattr(tok, "chat_template", None):
            LOG.warning("experimental forget_contexts: the tokenizer has no chat template; 'chat' left out")
            continue
        draws = settings.in_context_draws if kind == "in_context" else 1
        for draw in range(draws):
            for position, request in enumerate(forget):
                if kind == "in_context":
                    demos = _demonstrations(forbidden, settings.in_context_shots, settings.demonstration_seed, position, draw)
                    out.append(in_context(request, demos))
                elif kind == "question":
                    out.append(as_question(request))
                else:
                    out.append(in_chat(request, tok))  # type: ignore[arg-type]
    return out
