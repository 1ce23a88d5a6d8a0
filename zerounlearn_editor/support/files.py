"""Atomic file writes, an inter-process lock, JSON reads and content hashes."""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterator, Optional, Union

LOG = logging.getLogger(__name__)


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats replaced by ``None`` (strict JSON has no NaN/inf)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_atomic(path: Union[str, Path], write: Callable[[BinaryIO], Any], prefix: Optional[str] = None) -> Path:
    """Write ``path`` with ``write(handle)`` into a temporary sibling file (name ``{prefix}XXXX.tmp``, default
    prefix ``.{name}.``) and a rename: ``path`` is whole or as it was, also when ``write`` raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix or f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def exclusive_lock(path: Union[str, Path], waiting: str = "") -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its folder, if absent; never removed) for the block:
    one process at a time on this host runs it; the others wait (logging ``waiting``, when given, once). The lock
    goes with the process, also when it is killed. POSIX only (``fcntl``, imported here so that this module imports
    everywhere)."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                LOG.info("%s (lock %s)", waiting, path)
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_bytes_atomic(path: Union[str, Path], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`write_atomic`)."""
    return write_atomic(path, lambda handle: handle.write(data))


def write_text_atomic(path: Union[str, Path], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Union[str, Path], data: Any) -> Path:
    """Write ``data`` as indented, strict JSON (NaN/inf become ``null``), atomically."""
    text = json.dumps(json_safe(data), indent=1, sort_keys=False, allow_nan=False)
    return write_text_atomic(path, text + "\n")


def read_json(path: Union[str, Path]) -> Any:
    """Read a JSON file; a file that does not parse raises ``ValueError`` naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def sha256_of_file(path: Union[str, Path]) -> str:
    """Hex SHA-256 of a file's bytes, read in 4 MiB blocks (a model's weight file is never held whole)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def file_identity(path: Union[str, Path]) -> Dict[str, str]:
    """``{"file": path, "sha256": its hash}``: how a result names the configuration file it used."""
    return {"file": str(path), "sha256": sha256_of_file(path)}


def sha256_of_json(data: Any) -> str:
    """Hex SHA-256 of the canonical JSON text of ``data`` (sorted keys)."""
    return hashlib.sha256(json.dumps(json_safe(data), sort_keys=True).encode("utf-8")).hexdigest()
