"""Progress bars that every stage shares (``tqdm``, shown once a stage has run 2 s), and switches to hide
them: :func:`set_progress` for the process (``zerounlearn --quiet``), :func:`progress_scope` for one block
(``progress=False`` of an edit, ``--no-progress``). What is computed is logged, not shown in the bars."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterable, Iterator, Optional

from tqdm.auto import tqdm

_DEFAULT = {"enabled": True}
_SCOPE: contextvars.ContextVar[Optional[bool]] = contextvars.ContextVar("zerounlearn_progress", default=None)


def progress_enabled() -> bool:
    """Whether bars are shown here: the innermost :func:`progress_scope`, else :func:`set_progress`."""
    scoped = _SCOPE.get()
    return _DEFAULT["enabled"] if scoped is None else scoped and _DEFAULT["enabled"]


def set_progress(enabled: bool) -> None:
    """Show (``True``) or hide progress bars for the whole process."""
    _DEFAULT["enabled"] = bool(enabled)


@contextlib.contextmanager
def progress_scope(enabled: bool) -> Iterator[None]:
    """Hide bars inside the block when ``enabled`` is false (``True`` cannot override a process-wide off)."""
    token = _SCOPE.set(bool(enabled) and (_SCOPE.get() is not False))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def progress_bar(iterable: Optional[Iterable[Any]] = None, **kwargs: Any) -> tqdm:
    """A ``tqdm`` bar (``delay=2`` s, hidden when :func:`progress_enabled` is false)."""
    kwargs.setdefault("delay", 2.0)
    kwargs.setdefault("leave", False)
    disable = kwargs.pop("disable", False) or not progress_enabled()
    return tqdm(iterable, disable=disable, **kwargs)
