"""Handing the C allocator's free heap pages back to the system between the large stages of an edit.

Under glibc, blocks below the mmap threshold come from the heap, and freed ones stay there: an edit's many small
tensors (a chunk's keys, token ids, the stored replay ids) interleave with freed ones, and the process's RSS keeps
what earlier passes freed. ``malloc_trim(0)`` returns every free page in the heap (not only its top) to the system.
Elsewhere (no glibc) this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Callable, Optional

__all__ = ["release_free_memory"]

LOG = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        LOG.debug("no malloc_trim in %s: free heap pages stay with the process", name)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Hand the C allocator's free heap pages back to the system (glibc ``malloc_trim(0)``); ``False`` where there
    is no glibc. Live memory is untouched; an RSS reading taken next counts it rather than what earlier work freed."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
