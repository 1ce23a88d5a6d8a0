"""``zerounlearn retain-set``: draft a retain file of facts that share the answers of the facts to forget.

The facts file is read as ``unlearn`` reads it (:func:`~zerounlearn_editor.data.fact_records.read_facts_file`); the
pool is a benchmark dataset (a name of :data:`~zerounlearn_editor.data.datasets.DATASETS` or a file of one of their
formats: its requests' ``prompt``, ``subject`` and ``ground_truth``) or a facts file of the same format as the
facts. With a model, only the facts it knows are served (forget-prompt token accuracy >=
:data:`~zerounlearn_editor.evaluation.selection.KNOWN_MIN_ACCURACY`, the known test of ``bench-scale``): a fact the
model does not give takes no target step under ``--many``'s ``suppress_rank_limit`` and needs no shield. The draw is
:func:`~zerounlearn_editor.data.answer_retain.draw_answer_retain`; the result is a list of ``{"prompt", "subject",
"answer"}`` that ``unlearn --retain`` reads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from zerounlearn_editor.data.answer_retain import draw_answer_retain
from zerounlearn_editor.data.datasets import DATASETS, detect_format, load_cases
from zerounlearn_editor.data.fact_records import read_facts_file
from zerounlearn_editor.evaluation.selection import KNOWN_MIN_ACCURACY
from zerounlearn_editor.support.files import write_json_atomic

LOG = logging.getLogger(__name__)

__all__ = ["RetainSetResult", "read_facts", "read_pool", "known_facts_mask", "build_retain_set"]


@dataclass(frozen=True)
class RetainSetResult:
    """What :func:`build_retain_set` drew: ``records`` (the retain file's content), the number of facts, of facts
    served (known, with an answer), and the served facts that found no eligible pool record left with their answer
    (none in the pool, or all drawn for earlier facts sharing it)."""

    records: List[Dict[str, str]]
    facts: int
    served: int
    unmatched: List[str]

    def summary(self) -> str:
        """One line for the terminal."""
        return (f"{len(self.records)} retain facts for {self.served} of {self.facts} facts to forget"
                + (f"; no eligible pool fact left with the answer of {len(self.unmatched)} (none in the pool, or all "
                   f"drawn for earlier facts with that answer): {', '.join(self.unmatched[:5])}"
                   + (" ..." if len(self.unmatched) > 5 else "") if self.unmatched else ""))


def read_pool(pool: Union[str, Path]) -> List[Dict[str, Any]]:
    """The pool's records ``{"prompt", "subject", "answer"}``: a dataset name or a benchmark file (its cases'
    requests), else a facts file (read and checked like ``--facts``; errors name the file, record and field)."""
    key = str(pool)
    benchmark = key in DATASETS
    if not benchmark:
        if not Path(key).exists():
            raise FileNotFoundError(f"--pool {key!r}: neither a dataset name ({', '.join(DATASETS)}) nor a file")
        try:
            benchmark = Path(key).is_dir() or detect_format(key) in DATASETS
        except ValueError:
            benchmark = False  # not a benchmark format: a facts file, checked below
    if benchmark:
        return [{"prompt": c.request["prompt"], "subject": c.request["subject"],
                 "answer": c.request.get("ground_truth")} for c in load_cases(key)]
    return read_facts(key)


def known_facts_mask(model: Any, tok: Any, facts: Sequence[Dict[str, Any]],
                     min_accuracy: float = KNOWN_MIN_ACCURACY) -> List[bool]:
    """Per fact: it has an answer and the model's teacher-forced token accuracy on ``prompt + " " + answer`` is
    ``>= min_accuracy``."""
    from zerounlearn_editor.data.types import Probe
    from zerounlearn_editor.evaluation.metrics import evaluate_probes

    answered = [i for i, f in enumerate(facts) if f["answer"]]
    acc = evaluate_probes(model, tok, [Probe(facts[i]["prompt"], facts[i]["answer"]) for i in answered])["acc"]
    mask = [False] * len(facts)
    for i, value in zip(answered, acc):
        mask[i] = value >= min_accuracy
    return mask


def read_facts(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """The facts to forget ``{"prompt", "subject", "answer"}``, read and checked as ``unlearn --facts`` reads them."""
    return [{"prompt": r.prompt, "subject": r.subject, "answer": r.answer} for r in read_facts_file(path).records]


def build_retain_set(facts: Sequence[Dict[str, Any]], pool: Sequence[Dict[str, Any]], k: int = 10, seed: int = 0,
                     model: Any = None, tok: Any = None, out: Optional[Union[str, Path]] = None,
                     serve: Optional[Sequence[bool]] = None) -> RetainSetResult:
    """Serve the ``facts`` (:func:`read_facts`; all with an answer, or with ``model`` / ``tok`` the known ones, or
    those ``serve`` marks when the caller has scored them already), draw up to ``k`` same-answer retain facts each
    from ``pool`` (:func:`read_pool`), and write them to ``out`` (JSON, atomically) when given. The callers read
    every input once, before the model loads."""
    if serve is None:
        serve = known_facts_mask(model, tok, facts) if model is not None else [bool(f["answer"]) for f in facts]
    groups = draw_answer_retain(facts, pool, k, seed, serve=serve)
    chosen = [record for group in groups for record in group]
    unmatched = [f["answer"] for f, group, s in zip(facts, groups, serve) if s and not group]
    result = RetainSetResult(chosen, len(facts), sum(serve), unmatched)
    if out is not None:
        write_json_atomic(out, chosen)
    LOG.info("%s", result.summary())
    return result
