"""What one ``zerounlearn bench-scale`` run does: :class:`ScaleConfig` (checked by :meth:`ScaleConfig.validate`) and
the perplexity text it reads (:func:`ppl_text_of`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.evaluation.selection import KNOWN_MIN_ACCURACY
from zerounlearn_editor.harness.bench_config import BenchConfigError

__all__ = ["KNOWN_MIN_ACCURACY", "ScaleConfig", "ppl_text_of"]




@dataclass
class ScaleConfig:
    """One scale run.

    Attributes:
        hparams: ZeroUnlearn / ZeroUnlearn-GD YAML files; the first one's model and statistics
            settings are used for all (the others must share them).
        data: dataset name or data file (as ``zerounlearn bench --data``); ``data_path``: with a name.
        seeds: sampling seeds.
        out: output folder.
        ns: batch sizes (batch runs) or ``[n]`` facts per round (stream runs).
        rounds: stream rounds (stream runs only).
        eval_every: stream runs score every forgotten fact and the perplexity every so many rounds
            (and after the last round); the round-1 facts are scored after every round.
        ppl_tokens: WikiText-2 tokens for perplexity (0 = none); ``ppl_text``: another text file.
        eval_batch_size: probes per forward pass.
        known_min_accuracy: forget-prompt token accuracy of the unedited model that makes a case "known".
        target_chunk: facts per cached target file (batch runs).
        known_only: draw only known cases (as the known subset: forget-prompt accuracy >= ``known_min_accuracy``).
        device: where the model is loaded.
    """

    hparams: List[str]
    data: str
    seeds: List[int]
    out: str
    ns: List[int]
    rounds: int = 1
    eval_every: int = 10
    ppl_tokens: int = 20000
    eval_batch_size: int = 32
    known_min_accuracy: float = KNOWN_MIN_ACCURACY
    target_chunk: int = 50
    known_only: bool = False
    data_path: Optional[str] = None
    ppl_text: Optional[str] = None
    device: str = "cpu"

    def validate(self) -> None:
        """Value ranges; every YAML must exist."""
        if not self.hparams:
            raise BenchConfigError("bench-scale: no --hparams given")
        for path in self.hparams:
            if not Path(path).is_file():
                raise BenchConfigError(f"bench-scale: hparams file {path} not found")
        if not self.ns or any(n < 1 for n in self.ns):
            raise BenchConfigError(f"bench-scale: --n must be positive integers, got {self.ns}")
        if self.rounds < 1 or self.eval_every < 1 or self.target_chunk < 1:
            raise BenchConfigError("bench-scale: --rounds, --eval-every and --target-chunk must be >= 1")
        if self.ppl_tokens < 0 or self.eval_batch_size < 1:
            raise BenchConfigError("bench-scale: --ppl-tokens must be >= 0 and --batch-size >= 1")
        if not 0.0 < self.known_min_accuracy <= 1.0:
            raise BenchConfigError(f"bench-scale: known_min_accuracy must be in (0, 1], got {self.known_min_accuracy}")
        if not self.seeds:
            raise BenchConfigError("bench-scale: no seed given")


def ppl_text_of(config: ScaleConfig) -> Optional[str]:
    """The perplexity text (``None`` with ``ppl_tokens == 0``): ``ppl_text``, else the embedded WikiText-2 test split
    (as the bench, :func:`~zerounlearn_editor.data.builtin.default_ppl_text`)."""
    return (config.ppl_text or str(default_ppl_text())) if config.ppl_tokens > 0 else None
