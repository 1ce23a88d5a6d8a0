"""Fluency guard: the edit's perplexity cost on a short built-in text, checked after every edit.

The perplexity on the first ``DEFAULT_TOKENS`` tokens of the package's WikiText-2 text (or ``fluency_text``)
is measured before the first write-back and after the last; the increase ``after / before - 1`` is compared
with the YAML's ``fluency_max_increase`` (``null``: no guard). The apply functions' ``fluency_guard`` mode:
``"refuse"`` (default: the edit is refused, weights restored, :class:`FluencyError`), ``"warn"`` (kept with a
warning; ``zerounlearn unlearn --allow-fluency-loss``) or ``"off"``. An edit within the threshold but above
:data:`WARN_INCREASE` is kept with a warning (every mode but ``"off"``). The guard only reads; its figures go into
``EditReport.fluency``.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

from torch import nn

from zerounlearn_editor.engine.eval_mode import eval_mode

LOG = logging.getLogger(__name__)

GUARD_MODES = ("refuse", "warn", "off")
DEFAULT_MAX_INCREASE = 1.0
"""Refuse an edit whose guard perplexity more than doubles (``after > 2 * before``)."""
WARN_INCREASE = 0.05
"""A passing edit that raises the guard perplexity by more than this (+5%) is kept with a warning. Measured on
SmolLM2 many-fact edits (benchmarks/RESULTS.md, "Capacity at scale"): guard readings above +5% went with +4.8% to
+19.7% on 3,000 WikiText-2 tokens (the 200-fact edits: +16% or more), readings of -0.1% to +4.8% with +1.8% to
+9.0%; a warning at +5% fires on the many-fact edits that cost fluency badly, long before the refusal."""
DEFAULT_TOKENS = 256
_TEXT_CHARS = 64 * 1024  # enough characters of WikiText-2 for far more than DEFAULT_TOKENS tokens


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


def guard_perplexity(model: nn.Module, tok: Any, text: str, tokens: int) -> float:
    """Perplexity of ``model`` on the first ``tokens`` tokens of ``text``, one window (restores train/eval mode)."""
    from zerounlearn_editor.evaluation.perplexity import perplexity

    with eval_mode(model):
        return perplexity(model, tok, text, max_tokens=tokens, window=tokens, stride=tokens, batch_size=1)


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
