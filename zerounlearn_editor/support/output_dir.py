"""Output folders that are whole or absent: checked before the work, written aside, renamed into place.

``zerounlearn unlearn --out DIR`` writes a model or an adapter plus a report. So that no reader ever
sees a half-written folder, or new weights beside an earlier run's adapter files:

* :func:`check_output_dir` (before any heavy work): ``DIR`` is absent, an empty folder, or a folder
  of ours (it holds one of ``markers``); its parent can be written (probed by creating a folder
  there, so a read-only filesystem is found too). Anything else is an :class:`OutputDirError`
  naming the path.
* :func:`staged_output_dir`: the caller writes into a fresh temporary folder
  ``.<name>.zerounlearn-tmp-<host>-<pid>-XXXX`` in ``DIR``'s parent; on success it replaces ``DIR``
  whole (the old folder is renamed aside, the new one renamed in, the old one removed). On any
  error, a full disk included, the temporary folder is removed and ``DIR`` is as it was.
* Temporaries of killed runs (their process gone from this host) are removed by the next run
  that writes beside them.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Iterator, List, Sequence, Union

__all__ = ["OutputDirError", "TEMP_TAG", "check_output_dir", "check_free_space", "staged_output_dir",
           "clean_stale_output_temps"]

LOG = logging.getLogger(__name__)

TEMP_TAG = ".zerounlearn-tmp-"
"""Marks a temporary output folder: ``.<name>{TEMP_TAG}<host>-<pid>-XXXX``."""


class OutputDirError(ValueError):
    """An output folder cannot be used or written (the message names it)."""


def _host() -> str:
    return socket.gethostname().replace(".", "_").replace("-", "_")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (a temporary file's writer; ours counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def clean_stale_output_temps(parent: Path, name: str) -> List[Path]:
    """Remove the temporary folders of ``name`` in ``parent`` whose writer (this host) is gone."""
    removed = []
    prefix = f".{name}{TEMP_TAG}{_host()}-"
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if not entry.name.startswith(prefix):
                continue
            pid_text = entry.name[len(prefix):].split("-", 1)[0]
            if pid_text.isdigit() and not pid_alive(int(pid_text)):
                shutil.rmtree(entry, ignore_errors=True)
                LOG.warning("removed %s, left by an interrupted run", entry)
                removed.append(entry)
    return removed


def check_output_dir(out: Union[str, Path], markers: Sequence[str]) -> None:
    """Refuse ``out`` unless it is absent, empty or ours (holds one of ``markers``) and its parent is writable."""
    out = Path(out)
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise OutputDirError(f"--out {out} exists and is not a folder")
        try:
            entries = list(out.iterdir())
        except OSError as exc:
            raise OutputDirError(f"--out {out}: cannot list the folder ({exc})") from exc
        if entries and not any((out / marker).is_file() for marker in markers):
            raise OutputDirError(
                f"--out {out} is a non-empty folder that this tool did not write (no {' or '.join(markers)}); "
                f"give a new or empty folder (a folder of an earlier run is replaced whole)"
            )
    parent = out.absolute().parent
    existing = _existing_ancestor(parent)
    if not existing.is_dir():
        raise OutputDirError(f"--out {out}: {existing} is not a folder")
    try:
        probe = tempfile.mkdtemp(dir=existing, prefix=f".{out.name}{TEMP_TAG}probe-")
        os.rmdir(probe)
    except OSError as exc:
        raise OutputDirError(f"--out {out}: cannot write in {existing} ({exc})") from exc


def check_free_space(out: Union[str, Path], needed: int) -> None:
    """Refuse when the disk that will hold ``out`` has less than ``needed`` bytes (plus 1 MiB) free."""
    existing = _existing_ancestor(Path(out).absolute().parent)
    free = shutil.disk_usage(existing).free
    if free < needed + (1 << 20):
        raise OutputDirError(
            f"--out {out}: {existing} has {free:,} bytes free, the output needs about {needed:,}; free some space "
            "or choose another disk"
        )


def _publish(tmp: Path, out: Path) -> None:
    """Move the finished ``tmp`` to ``out``, replacing an existing ``out`` whole."""
    if out.exists() or out.is_symlink():
        aside = tmp.with_name(tmp.name + "-old")
        os.replace(out, aside)
        os.replace(tmp, out)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, out)


def _write_errors() -> tuple:
    """The exception types of a failed write: ``OSError`` and safetensors' own (a full disk)."""
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors ships with transformers
        return (OSError,)
    return (OSError, SafetensorError)


@contextlib.contextmanager
def staged_output_dir(out: Union[str, Path]) -> Iterator[Path]:
    """Yield a temporary folder beside ``out``; on success it becomes ``out`` (see the module docstring)."""
    out = Path(out)
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        clean_stale_output_temps(parent, out.name)
        tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}{TEMP_TAG}{_host()}-{os.getpid()}-"))
    except OSError as exc:
        raise OutputDirError(f"cannot write the output folder {out} ({exc})") from exc
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp creates 0700; the output is a folder like any other
        yield tmp
        _publish(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, _write_errors()):  # e.g. a full disk while saving
            raise OutputDirError(f"cannot write the output folder {out} ({exc}); it is as it was before this run") from exc
        raise
