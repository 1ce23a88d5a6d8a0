"""A disk cache of the eigendecomposition of a statistic ``C0`` ``[d_in, d_in]`` (the null-space step of
ZeroUnlearn-GD: a float64 ``eigh`` of a few seconds per layer at ``d_in`` 1,536, the same in every edit that
reads the same statistics file).

An entry is keyed by everything the eigenpairs depend on: the SHA-256 of ``C0``'s float64 bytes and shape, the
computing function's qualified name, its device type (and, on CUDA, the GPU's name and the CUDA version), the torch
version and build configuration, the CPU's instruction set and machine type, ``MKL_CBWR`` and torch's thread count,
so a changed ``C0`` (one ulp of one entry), another LAPACK code path or a ``stats_dir`` copied from another machine
never reads an old entry. The eigenpairs are stored, not a thresholded basis: any threshold is applied after. Files
live in ``{stats_dir}/nullspace_eigh/eigh_{key}.npz`` (numpy, no pickle), written atomically like the statistics files;
each records its key and the SHA-256 of its arrays, and a file that does not read back exactly (truncated,
altered, another key) is recomputed and written again, with a warning. A cache that cannot be written is
skipped (the edit goes on).
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Tuple

import numpy as np
import torch

from zerounlearn_editor.engine.stats.tempfiles import clean_stale_temp_files, temp_prefix
from zerounlearn_editor.support.files import write_atomic

__all__ = ["EIGH_FOLDER", "MIN_CACHED_DIM", "EigenCache", "eigen_cache_of", "eigh_key"]

LOG = logging.getLogger(__name__)

EIGH_FOLDER = "nullspace_eigh"
"""The folder of the entries under ``stats_dir``."""
MIN_CACHED_DIM = 256
"""Below this ``d_in`` the ``eigh`` takes milliseconds and is not cached (the tiny test models)."""
_FORMAT = "zerounlearn-eigh-1"

Eigenpairs = Tuple[torch.Tensor, torch.Tensor]


def _platform_tag(device: torch.device) -> str:
    """What the float64 ``eigh``'s rounding depends on beyond its input: torch's version and build configuration,
    the CPU's instruction set and machine type, ``MKL_CBWR``, the thread count and, on CUDA, the GPU and CUDA."""
    build = hashlib.sha256(torch.__config__.show().encode()).hexdigest()[:16]
    cpu = torch.backends.cpu.get_cpu_capability()
    parts = [torch.__version__, build, cpu, platform.machine(), os.environ.get("MKL_CBWR", ""),
             str(torch.get_num_threads()), device.type]
    if device.type == "cuda":
        parts += [torch.cuda.get_device_name(device), str(torch.version.cuda)]
    return "|".join(parts)


def _compute_name(compute: Optional[Callable]) -> str:
    """``module.qualname`` of a function, or of the type of a callable object ("" for None)."""
    if compute is None:
        return ""
    named = compute if hasattr(compute, "__qualname__") else type(compute)
    return f"{getattr(named, '__module__', '')}.{named.__qualname__}"


def eigh_key(C0: torch.Tensor, compute: Optional[Callable] = None) -> str:
    """Hex SHA-256 of what the eigenpairs of ``C0`` ``[d_in, d_in]`` computed by ``compute`` depend on: its float64
    bytes and shape, the function's name and the platform (:func:`_platform_tag`)."""
    compute_name = _compute_name(compute)
    data = C0.detach().to(device="cpu", dtype=torch.float64).contiguous().numpy()
    digest = hashlib.sha256()
    header = f"{_FORMAT}|{tuple(C0.shape)}|{compute_name}|{_platform_tag(C0.device)}"
    digest.update(header.encode())
    digest.update(memoryview(data).cast("B"))
    return digest.hexdigest()


def _arrays_digest(evals: np.ndarray, evecs: np.ndarray) -> str:
    """Hex SHA-256 of the two arrays' dtypes, shapes and bytes (``evals`` ``[d_in]``, ``evecs`` ``[d_in, d_in]``)."""
    digest = hashlib.sha256()
    for array in (evals, evecs):
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(np.ascontiguousarray(array)).cast("B"))
    return digest.hexdigest()


@dataclass(frozen=True)
class EigenCache:
    """The entries under ``folder`` (``{stats_dir}/nullspace_eigh``); matrices with ``d_in < min_dim`` pass
    through uncached."""

    folder: Path
    min_dim: int = MIN_CACHED_DIM

    def path(self, key: str) -> Path:
        """The file of the entry ``key``."""
        return self.folder / f"eigh_{key}.npz"

    def eigenpairs(self, C0: torch.Tensor, compute: Callable[[torch.Tensor], Eigenpairs]) -> Eigenpairs:
        """``compute(C0)`` (eigenvalues ``[d_in]``, eigenvectors ``[d_in, d_in]``, float64), read from the entry
        of ``C0`` when it holds exactly what was stored, else computed and stored; on ``C0``'s device."""
        if C0.dim() != 2 or C0.shape[0] < self.min_dim:
            return compute(C0)
        key = eigh_key(C0, compute)
        path = self.path(key)
        if path.exists():
            stored = _read_entry(path, key, C0.shape[0])
            if stored is not None:
                LOG.debug("eigendecomposition of C0 read from %s", path)
                return stored[0].to(C0.device), stored[1].to(C0.device)
        evals, evecs = compute(C0)
        _write_entry(path, key, evals, evecs)
        return evals, evecs


def eigen_cache_of(stats_dir: Optional[str]) -> Optional[EigenCache]:
    """The cache beside the statistics under ``stats_dir``, or None when ``stats_dir`` is not an existing folder
    (nothing is created for an edit whose statistics were given in memory)."""
    if not stats_dir or not Path(stats_dir).expanduser().is_dir():
        return None
    return EigenCache(Path(stats_dir).expanduser() / EIGH_FOLDER)


def _read_entry(path: Path, key: str, d_in: int) -> Optional[Eigenpairs]:
    """The eigenpairs stored at ``path`` when the file is whole and is the entry ``key`` of a ``d_in`` matrix,
    else None (with a warning saying why it is recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files") or not {"evals", "evecs", "key", "sha256"} <= set(data.files):
                raise ValueError("not an eigendecomposition entry (keys missing)")
            evals, evecs = data["evals"], data["evecs"]
            stored_key, stored_digest = str(data["key"]), str(data["sha256"])
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        LOG.warning("%s: unreadable eigendecomposition cache file (%s: %s); recomputing", path,
                    type(exc).__name__, exc)
        return None
    if stored_key != key:
        problem = f"holds the entry {stored_key[:16]}..., not {key[:16]}..."
    elif evals.shape != (d_in,) or evecs.shape != (d_in, d_in) or evals.dtype != np.float64 \
            or evecs.dtype != np.float64:
        problem = f"arrays of shape {evals.shape} / {evecs.shape} ({evals.dtype}), not [{d_in}] / [{d_in}, {d_in}]"
    elif _arrays_digest(evals, evecs) != stored_digest:
        problem = "its arrays do not match their recorded SHA-256 (altered or partly written)"
    else:
        return torch.from_numpy(evals), torch.from_numpy(evecs)
    LOG.warning("%s: %s; recomputing", path, problem)
    return None


def _write_entry(path: Path, key: str, evals: torch.Tensor, evecs: torch.Tensor) -> None:
    """Store the entry atomically; an unwritable cache is logged and skipped."""
    values = evals.detach().to(device="cpu", dtype=torch.float64).contiguous().numpy()
    vectors = evecs.detach().to(device="cpu", dtype=torch.float64).contiguous().numpy()
    arrays = {"evals": values, "evecs": vectors, "key": np.array(key), "format": np.array(_FORMAT),
              "sha256": np.array(_arrays_digest(values, vectors))}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_temp_files(path.parent, "eigh_*.tmp")
        write_atomic(path, lambda handle: np.savez(handle, **arrays), temp_prefix(path))
    except OSError as exc:
        LOG.info("eigendecomposition not cached at %s (%s)", path, exc)
        return
    LOG.debug("eigendecomposition of C0 written to %s", path)
