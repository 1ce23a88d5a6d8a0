"""The statistics cache in EasyEdit's npz layout: where a file lives, and reading and writing it (atomically,
without pickle; ``zerounlearn.*`` metadata strings beside EasyEdit's keys)."""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict

import numpy as np
import torch

from zerounlearn_editor.engine.stats.tempfiles import clean_stale_temp_files, temp_prefix
from zerounlearn_editor.support.files import write_atomic

__all__ = ["NP_DTYPES", "StatsCacheError", "SecondMoment", "stats_path", "save_second_moment", "load_second_moment",
           "corpus_cache_name"]

NP_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
"""The storage dtypes of a cached statistic (numpy, so EasyEdit can read it, has no bfloat16)."""


class StatsCacheError(ValueError):
    """A statistics cache file or folder cannot be used (the message names it)."""


@dataclass
class SecondMoment:
    """Running ``sum k k^T`` ``[d_in, d_in]`` (float64) over ``count`` tokens."""

    mom2: torch.Tensor
    count: int

    def moment(self) -> torch.Tensor:
        """``C0 = E[k k^T]`` ``[d_in, d_in]`` in float64."""
        if self.count <= 0:
            raise ValueError("second moment over zero tokens")
        return self.mom2.double() / self.count

    def merge(self, other: "SecondMoment") -> "SecondMoment":
        return SecondMoment(self.mom2.double() + other.mom2.double(), self.count + other.count)

    def as_stored(self, dtype: str) -> "SecondMoment":
        """The moment as :func:`save_second_moment` stores it in ``dtype`` and :func:`load_second_moment` reads it
        back (``mom2`` rounded to ``dtype``, float64 ``[d_in, d_in]``): an edit that computed the statistic uses what
        a later edit reads from the file, bit for bit (and the eigendecomposition cache, keyed by those bits, hits)."""
        return SecondMoment(torch.from_numpy(_stored_mom2(self, dtype).astype(np.float64)), self.count)


def _stored_mom2(stat: SecondMoment, dtype: str) -> np.ndarray:
    """``stat.mom2`` ``[d_in, d_in]`` as the cache file stores it in ``dtype`` (one of :data:`NP_DTYPES`)."""
    if dtype not in NP_DTYPES:
        raise StatsCacheError(f"cannot store statistics as {dtype!r}; use one of {sorted(NP_DTYPES)}")
    return stat.mom2.double().numpy().astype(NP_DTYPES[dtype])


def stats_path(stats_dir: str, model_name: str, ds_name: str, module: str, dtype: str, n_samples: int) -> Path:
    """EasyEdit's cache file for a module's second moment."""
    return Path(stats_dir) / model_name / f"{ds_name}_stats" / f"{module}_{dtype}_mom2_{n_samples}.npz"


def save_second_moment(path: Path, stat: SecondMoment, sample_size: int, dtype: str, meta: Dict[str, str]) -> None:
    """Write ``stat`` atomically in EasyEdit's npz layout (``meta`` as ``zerounlearn.*`` strings); raises
    :class:`StatsCacheError` naming the folder when it cannot be created or written."""
    if dtype not in NP_DTYPES:
        raise StatsCacheError(f"{path}: cannot store statistics as {dtype!r}; use one of {sorted(NP_DTYPES)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StatsCacheError(f"cannot create the statistics folder {path.parent}: {exc}") from exc
    clean_stale_temp_files(path.parent)
    arrays = {
        "mom2.constructor": np.array("zerounlearn_editor.engine.stats.SecondMoment()"),
        "mom2.count": np.array(stat.count),
        "mom2.mom2": _stored_mom2(stat, dtype),
        "sample_size": np.array(sample_size),
    }
    arrays.update({f"zerounlearn.{k}": np.array(v) for k, v in meta.items()})
    prefix = temp_prefix(path)  # see clean_stale_temp_files
    try:
        write_atomic(path, lambda handle: np.savez(handle, **arrays), prefix)
    except OSError as exc:  # e.g. a full disk: no partial file is left, the cache is as it was
        raise StatsCacheError(f"cannot write the statistics file {path} ({exc}); nothing was written there "
                              "(stats_dir must be a writable folder with room for it)") from exc


def load_second_moment(path: Path) -> tuple[SecondMoment, Dict[str, str]]:
    """Read a cached second moment (EasyEdit's or ours) without pickle, and its metadata (``zerounlearn.*``,
    ``sample_size``, the stored ``dtype``); raises :class:`StatsCacheError` naming the file when it is not a
    readable statistics file."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise StatsCacheError(f"{path}: not an npz archive of statistics")
            absent = [k for k in ("mom2.mom2", "mom2.count") if k not in data.files]
            if absent:
                raise StatsCacheError(f"{path}: not a statistics file: key(s) {absent} missing")
            mom2 = data["mom2.mom2"]
            if mom2.ndim != 2 or mom2.shape[0] != mom2.shape[1] or not np.issubdtype(mom2.dtype, np.floating):
                raise StatsCacheError(
                    f"{path}: 'mom2.mom2' is not a square float matrix (shape {mom2.shape}, {mom2.dtype})"
                )
            count = int(data["mom2.count"])
            stat = SecondMoment(torch.from_numpy(mom2.astype(np.float64)), count)
            meta = {k.split(".", 1)[1]: str(data[k]) for k in data.files if k.startswith("zerounlearn.")}
            if "sample_size" in data.files:
                meta["sample_size"] = str(data["sample_size"])
            meta["dtype"] = str(mom2.dtype)  # the stored dtype
    except StatsCacheError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise StatsCacheError(f"{path}: unreadable statistics file ({type(exc).__name__}: {exc})") from exc
    if count < 0 or not torch.isfinite(stat.mom2).all():
        raise StatsCacheError(
            f"{path}: corrupt statistics (count {count}, finite={bool(torch.isfinite(stat.mom2).all())})"
        )
    return stat, meta


def corpus_cache_name(corpus: str) -> str:
    """The ``ds_name`` part of the cache path: a built-in corpus's name, a file's stem, a folder's name
    or the hub name (``wiki_passages_3643`` for both the built-in corpus and its ``.jsonl`` file)."""
    from zerounlearn_editor.data.builtin import builtin_corpus_name

    builtin = builtin_corpus_name(corpus)
    if builtin is not None:
        return builtin
    path = Path(corpus).expanduser()
    if path.suffix.lower() in (".txt", ".jsonl", ".json"):
        return path.stem
    if path.is_dir():
        return path.name
    return corpus.removeprefix("hub:").replace("/", "_")
