"""Output folders that are whole or absent: checked before the work, written aside, renamed into place.

:func:`check_output_dir` refuses (:class:`OutputDirError`, naming the path) an ``--out`` that is not
absent, empty or ours (holds one of ``markers``), or whose parent cannot be written.
:func:`staged_output_dir` yields a fresh ``.<name>.zerounlearn-tmp-<host>-<pid>-XXXX`` beside it that
replaces it whole on success and is removed on any error (a full disk included); temporaries of killed
runs on this host are removed by the next run beside them. An ``--out`` that is a symbolic link to a folder
(or a dangling link) is written through: the staging folder sits beside the link's target, the target is
replaced, the link is left as it is.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Iterator, Sequence, Union

LOG = logging.getLogger(__name__)

TEMP_TAG = ".zerounlearn-tmp-"
"""Marks a temporary output folder: ``.<name>{TEMP_TAG}<host>-<pid>-XXXX``."""


class OutputDirError(ValueError):
    """An output folder cannot be used or written (the message names it)."""


def _host() -> str:
    return socket.gethostname().replace(".", "_").replace("-", "_")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (a temporary file's writer; ours counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def existing_ancestor(path: Path) -> Path:
    """``path`` (made absolute) or its nearest existing parent folder."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def resolve_output_path(out: Union[str, Path]) -> Path:
    """``out``, or the folder a symbolic link ``out`` points to (followed to its end; made absolute)."""
    out = Path(out)
    return Path(os.path.realpath(out)) if out.is_symlink() else out


def remove_entry(path: Path) -> bool:
    """Remove a file, a symbolic link (not what it points to) or a folder tree; whether it is gone."""
    if path.is_symlink() or path.is_file():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)
    return not (path.exists() or path.is_symlink())


def _clean_stale_temps(parent: Path, name: str) -> None:
    """Remove the temporary folders of ``name`` in ``parent`` whose writer (this host) is gone."""
    prefix = f".{name}{TEMP_TAG}{_host()}-"
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            pid_text = entry.name[len(prefix):].split("-", 1)[0]
            if entry.name.startswith(prefix) and pid_text.isdigit() and not pid_alive(int(pid_text)):
                if remove_entry(entry):
                    LOG.warning("removed %s, left by an interrupted run", entry)
                else:
                    LOG.warning("could not remove %s, left by an interrupted run; remove it by hand", entry)


def check_output_dir(out: Union[str, Path], markers: Sequence[str]) -> None:
    """Refuse ``out`` unless it is absent, empty or ours (holds one of ``markers``) and its parent is writable
    (for a symbolic link: the parent of the folder it points to)."""
    given = Path(out)
    out = resolve_output_path(given)
    if given.is_symlink() and out.exists() and not out.is_dir():
        raise OutputDirError(f"--out {given} is a link to {out}, which is not a folder")
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
    existing = existing_ancestor(parent)
    if not existing.is_dir():
        raise OutputDirError(f"--out {out}: {existing} is not a folder")
    try:
        probe = tempfile.mkdtemp(dir=existing, prefix=f".{out.name}{TEMP_TAG}probe-")
        os.rmdir(probe)
    except OSError as exc:
        raise OutputDirError(f"--out {out}: cannot write in {existing} ({exc})") from exc


def check_free_space(out: Union[str, Path], needed: int) -> None:
    """Refuse when the disk that will hold ``out`` has less than ``needed`` bytes (plus 1 MiB) free."""
    existing = existing_ancestor(Path(out).absolute().parent)
    free = shutil.disk_usage(existing).free
    if free < needed + (1 << 20):
        raise OutputDirError(
            f"--out {out}: {existing} has {free:,} bytes free, the output needs about {needed:,}; free some space "
            "or choose another disk"
        )


def replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished folder ``tmp`` to ``out`` (same filesystem), replacing an existing ``out`` whole."""
    aside = tmp.with_name(tmp.name + "-old")
    if out.exists() or out.is_symlink():
        os.replace(out, aside)
    os.replace(tmp, out)
    remove_entry(aside)


@contextlib.contextmanager
def staged_output_dir(out: Union[str, Path]) -> Iterator[Path]:
    """Yield a temporary folder beside ``out``; on success it becomes ``out`` (see the module docstring; a
    symbolic link ``out``: its target)."""
    out = resolve_output_path(out)
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _clean_stale_temps(parent, out.name)
        tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}{TEMP_TAG}{_host()}-{os.getpid()}-"))
    except OSError as exc:
        raise OutputDirError(f"cannot write the output folder {out} ({exc})") from exc
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp creates 0700; the output is a folder like any other
        yield tmp
        replace_dir(tmp, out)
    except BaseException as exc:
        from safetensors import SafetensorError

        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, (OSError, SafetensorError)):  # e.g. a full disk while saving
            raise OutputDirError(
                f"cannot write the output folder {out} ({exc}); it is as it was before this run"
            ) from exc
        raise
