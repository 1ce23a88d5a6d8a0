"""Stale temporary cache files (statistics, eigendecompositions): the ``{file}.{host}.{pid}.XXXX.tmp`` of writers
that were killed."""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from pathlib import Path

from zerounlearn_editor.support.output_dir import pid_alive

__all__ = ["STALE_TEMP_SECONDS", "clean_stale_temp_files", "temp_prefix"]

LOG = logging.getLogger(__name__)
STALE_TEMP_SECONDS = 3600.0
"""A temp file older than this (or of a dead writer on this host) is removed by the next write."""


def temp_prefix(path: Path) -> str:
    """The temporary-file prefix of a writer of ``path`` on this host: ``{name}.{host}.{pid}.``."""
    return f"{path.name}.{socket.gethostname().replace('.', '_')}.{os.getpid()}."


def clean_stale_temp_files(folder: Path, pattern: str = "*_mom2_*.tmp") -> None:
    """Remove the stale ``{file}.{host}.{pid}.XXXX.tmp`` files matching ``pattern`` (default: the statistics
    files') of killed writers in ``folder`` (this host's writer no longer running, or older than
    :data:`STALE_TEMP_SECONDS`)."""
    host = socket.gethostname()
    now = time.time()
    for tmp in folder.glob(pattern):
        parts = tmp.name.split(".")
        try:
            stale = now - tmp.stat().st_mtime > STALE_TEMP_SECONDS
        except FileNotFoundError:
            continue
        if not stale and len(parts) >= 4 and parts[-4] == host.replace(".", "_") and parts[-3].isdigit():
            stale = not pid_alive(int(parts[-3]))
        if stale:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                LOG.warning("removed stale temporary statistics file %s (left by an interrupted writer)", tmp)
