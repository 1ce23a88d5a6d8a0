"""Where a scale run's stored rows and streams live and what they are keyed by.

A batch row ``(hparams, n)`` is ``<out>/seed_<s>/<tag>_n<n>.json`` (:func:`batch_row_path`); a stream is the folder
``<out>/seed_<s>/<tag>`` (:func:`stream_dir`), ``tag`` naming the YAML (:func:`yaml_tag`). Every row and stream
records the settings that change its numbers (:func:`run_settings` and the YAML's content hash); a rerun under other
settings is refused before the model loads, naming each differing one
(:mod:`~zerounlearn_editor.harness.stored_settings`, the check the bench uses for its seed files).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Sequence

from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.evaluation.perplexity import read_text
from zerounlearn_editor.harness.scale_config import ScaleConfig, ppl_text_of
from zerounlearn_editor.harness.stored_settings import as_stored

__all__ = [
    "BATCH_ROWS", "STREAMS", "yaml_tag", "record_tag", "run_settings", "cases_sha256", "batch_row_path", "stream_dir",
]


BATCH_ROWS = "seed_*/*_n*.json"
"""The stored batch rows of an output folder (a glob)."""


STREAMS = "seed_*/*/stream.json"
"""The stored streams of an output folder (a glob)."""


def yaml_tag(path: str) -> str:
    """A file-name tag for a YAML: its parent folder and stem (``ZeroUnlearn-GD_SmolLM2-135M-Instruct``), the folder
    taken from the absolute path (``many.yaml`` in the working directory ``runs/``: ``runs_many``). Never starts
    with ``_`` or ``.`` (matplotlib leaves a label starting with ``_`` out of the legend)."""
    p = Path(os.path.abspath(path))
    return f"{p.parent.name}_{p.stem}".lstrip("_.") or "hparams"


def record_tag(record: Mapping[str, Any]) -> str:
    """A batch row's YAML tag (rows before tags were stored: derived from its ``hparams`` path)."""
    return record.get("tag") or yaml_tag(record["hparams"])


def run_settings(config: ScaleConfig, pool: Sequence[UnlearnCase], model_name: str) -> Dict[str, Any]:
    """Everything besides the YAML that changes a row's numbers: the model (by name), the cases (SHA-256 of the
    loaded records, so an edited data file counts), the perplexity text (its SHA-256) and tokens, and the known
    subset's threshold and draw. Batch size, target chunk, device, rounds and ``eval_every`` change no number."""
    ppl_text = ppl_text_of(config)
    return as_stored({
        "model": model_name,
        "data_sha256": cases_sha256(pool),
        "ppl_tokens": config.ppl_tokens,
        "ppl_text_sha256": hashlib.sha256(read_text(ppl_text).encode("utf-8")).hexdigest() if ppl_text else None,
        "known_min_accuracy": config.known_min_accuracy,
        "known_only": config.known_only,
    })


def cases_sha256(cases: Sequence[UnlearnCase]) -> str:
    """SHA-256 of the cases' canonical JSON (every field of every case and probe; 0.4 s for CounterFact's 9,484
    train records on one core)."""
    text = json.dumps(list(cases), default=vars, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def batch_row_path(out: Path, seed: int, tag: str, n: int) -> Path:
    """``<out>/seed_<seed>/<tag>_n<n>.json``."""
    return Path(out) / f"seed_{seed}" / f"{tag}_n{n}.json"


def stream_dir(out: Path, seed: int, tag: str) -> Path:
    """``<out>/seed_<seed>/<tag>``: the round files and the newest round's edited weights."""
    return Path(out) / f"seed_{seed}" / tag
