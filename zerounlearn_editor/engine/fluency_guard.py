"""Fluency guard: the edit's perplexity cost on built-in text, checked after every edit.

The perplexity on :data:`GUARD_CHUNKS` passages of :data:`GUARD_WINDOW` tokens, one every :data:`GUARD_STEP` tokens
from token :data:`GUARD_FIRST` of the package's WikiText-2 text (each passage a window of its own; a
``fluency_text`` too short for that layout gives passages spread evenly over its tokens, or its first window:
:func:`guard_spans`), is measured before the first write-back and after the last; the increase
``after / before - 1`` is compared with the YAML's ``fluency_max_increase`` (``null``: no guard). The passages lie
after the 5000 tokens the bench's perplexity scores, so the guard is a reading of its own. The text's first 256
tokens (the guard before these passages) are an easy passage: on Gemma-3-270m they read +1.7% for an edit that
costs +17.1% on 5000 tokens (benchmarks/RESULTS.md 12.22). The apply functions' ``fluency_guard`` mode:
``"refuse"`` (default: the edit is refused, weights restored, :class:`FluencyError`), ``"warn"`` (kept with a
warning; ``zerounlearn unlearn --allow-fluency-loss``) or ``"off"``. An edit within the threshold but above
:data:`WARN_INCREASE` is kept with a warning (every mode but ``"off"``). The guard only reads; its figures go into
``EditReport.fluency``.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.eval_mode import eval_mode

LOG = logging.getLogger(__name__)

GUARD_MODES = ("refuse", "warn", "off")
DEFAULT_MAX_INCREASE = 1.0
"""Refuse an edit whose guard perplexity more than doubles (``after > 2 * before``)."""
WARN_INCREASE = 0.05
"""A passing edit that raises the guard perplexity by more than this (+5%) is kept with a warning. The guard's
passages track the 5000-token WikiText-2 perplexity within a few points on both real models (benchmarks/RESULTS.md
12.22), so a warning means a cost of about +5% there."""
GUARD_WINDOW = 128
"""Tokens per guard passage (fewer where the model has fewer positions): on the scaled edits of benchmarks/RESULTS.md
12.22, eight passages of 128 tokens were within 1.4 points of the 5000-token perplexity change on average (eight of
256: 0.9, at twice the cost; four of 256 and 64-token passages further off)."""
GUARD_CHUNKS = 8
GUARD_FIRST = 5000
GUARD_STEP = 1250
_TEXT_CHARS = 128 * 1024  # enough characters of WikiText-2 for the guard's last passage on the tokenizers measured


OVERRIDE_HINT = "keeps such an edit (a larger fluency_max_increase, or null, in the YAML changes the limit)"


class FluencyError(RuntimeError):
    """The edit raised the guard perplexity beyond the threshold; the weights were restored.

    The message is ``"{refusal}; {override} keeps such an edit (...)"``: ``override`` names how the caller keeps
    such an edit (the apply functions' ``fluency_guard='warn'``; a command line its own option, through
    :meth:`with_override`)."""

    def __init__(self, refusal: str, check: "FluencyCheck", override: str = "fluency_guard='warn'"):
        super().__init__(f"{refusal}; {override} {OVERRIDE_HINT}")
        self.refusal, self.check, self.override = refusal, check, override

    def with_override(self, override: str) -> "FluencyError":
        """The same refusal naming another way to keep the edit (e.g. ``--allow-fluency-loss``)."""
        return FluencyError(self.refusal, self.check, override)


@dataclass(frozen=True)
class FluencyCheck:
    """One guard measurement: perplexities before / after on ``tokens`` tokens, the threshold and the verdict."""

    ppl_before: float
    ppl_after: float
    tokens: int
    max_increase: float
    mode: str

    @property
    def increase(self) -> float:
        """``ppl_after / ppl_before - 1`` (0.33 = +33%)."""
        return self.ppl_after / self.ppl_before - 1.0

    @property
    def passed(self) -> bool:
        """Whether the increase is within the threshold (a non-finite perplexity never is)."""
        increase = self.increase
        return increase == increase and increase <= self.max_increase

    @property
    def warned(self) -> bool:
        """Passed, but above :data:`WARN_INCREASE` (kept with a warning)."""
        return self.passed and self.increase > WARN_INCREASE

    def warning(self) -> str:
        """The warning of an edit that passed above :data:`WARN_INCREASE`."""
        return (
            f"fluency guard: perplexity on {self.tokens} tokens of the built-in text went from {self.ppl_before:.3f} "
            f"to {self.ppl_after:.3f} ({self.increase:+.1%}): within the allowed {self.max_increase:+.0%} but above "
            f"{WARN_INCREASE:+.0%}, a measurable fluency cost; for many facts in one batch see <model>-many.yaml"
        )

    def message(self) -> str:
        return (
            f"fluency guard: perplexity on {self.tokens} tokens of the built-in text went from {self.ppl_before:.3f} "
            f"to {self.ppl_after:.3f} ({self.increase:+.1%}), beyond the allowed {self.max_increase:+.0%} "
            f"(key 'fluency_max_increase')"
        )

    def as_dict(self) -> Dict[str, Any]:
        return dict(asdict(self), increase=self.increase, passed=self.passed, warned=self.warned)


def guard_text() -> str:
    """The start of the package's WikiText-2 test text (unpacked once to the cache)."""
    from zerounlearn_editor.data.builtin import default_ppl_text

    with open(default_ppl_text(), encoding="utf-8") as handle:
        return handle.read(_TEXT_CHARS)


def guard_spans(n_tokens: int, window: int, chunks: int = GUARD_CHUNKS, first: int = GUARD_FIRST,
                step: int = GUARD_STEP) -> List[Tuple[int, int]]:
    """``[(start, end)]`` token spans of the guard's passages in a text of ``n_tokens`` tokens (pure).

    ``chunks`` spans of ``window`` tokens starting at ``first``, ``first + step``, ... where the text reaches the
    last; otherwise ``min(chunks, n_tokens // window)`` spans spread evenly from the first token to the last, or
    the whole text when it is at most one window. Raises ``ValueError`` for fewer than two tokens."""
    if n_tokens < 2 or window < 2 or chunks < 1:
        raise ValueError(f"the fluency guard needs at least two tokens of text, a window of two and one passage, got "
                         f"{n_tokens} tokens, a window of {window} and {chunks} passages")
    if n_tokens >= first + (chunks - 1) * step + window:
        return [(first + k * step, first + k * step + window) for k in range(chunks)]
    if n_tokens <= window:
        return [(0, n_tokens)]
    count = min(chunks, n_tokens // window)
    if count == 1:
        return [(0, window)]
    gap = (n_tokens - window) / (count - 1)
    return [(round(k * gap), round(k * gap) + window) for k in range(count)]


def guard_chunks(tok: Any, text: str, window: int) -> List[List[int]]:
    """The token ids of the guard's passages of ``text`` (the text, or a path to a UTF-8 file: ``read_text``;
    :func:`guard_spans`), each ``[<= window]``. Where the tokenizer puts a BOS token before the text (Gemma, Llama-3;
    not SmolLM2), every passage starts with it too, in place of its first token, as each document the model reads
    does: Gemma-3-270m's base perplexity on the passages is 230 without and 32 with it (benchmarks/RESULTS.md 12.22)."""
    from zerounlearn_editor.evaluation.perplexity import leading_token_ids, read_text

    ids = leading_token_ids(tok, read_text(text), GUARD_FIRST + (GUARD_CHUNKS - 1) * GUARD_STEP + window)
    bos = getattr(tok, "bos_token_id", None)
    starts_with_bos = bos is not None and bool(ids) and ids[0] == bos
    return [[bos] + ids[a + 1:b] if starts_with_bos and a > 0 else ids[a:b] for a, b in guard_spans(len(ids), window)]


def guard_perplexity(model: nn.Module, tok: Any, chunks: Sequence[Sequence[int]]) -> float:
    """``exp(mean NLL)`` of ``model`` over the scored tokens of every passage in ``chunks`` (each one window of its
    own, :func:`guard_chunks`; restores train/eval mode)."""
    from zerounlearn_editor.evaluation.perplexity import scored_windows

    total, count = 0.0, 0
    with eval_mode(model), torch.no_grad():
        for chunk in chunks:
            for _, logits, targets in scored_windows(model, tok, list(chunk), len(chunk), len(chunk), 1):
                total += float(torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum"))
                count += int(targets.numel())
    return math.exp(total / count)


def judge_fluency(ppl_before: float, ppl_after: float, tokens: int, max_increase: float, mode: str) -> FluencyCheck:
    """The :class:`FluencyCheck` of two perplexities (pure; raises nothing)."""
    if mode not in GUARD_MODES:
        raise ValueError(f"fluency guard mode must be one of {GUARD_MODES}, got {mode!r}")
    return FluencyCheck(float(ppl_before), float(ppl_after), int(tokens), float(max_increase), mode)


def resolve_mode(max_increase: Optional[float], override: Optional[str]) -> str:
    """The mode of one edit: ``override`` (the ``fluency_guard`` argument of an apply function), else
    ``"refuse"``, or ``"off"`` where the YAML's ``fluency_max_increase`` is null."""
    mode = override if override is not None else ("off" if max_increase is None else "refuse")
    if mode not in GUARD_MODES:
        raise ValueError(f"fluency_guard must be one of {GUARD_MODES}, got {mode!r}")
    return mode
