"""``support.memory.release_free_memory``: free heap pages go back to the system, live memory stays."""
from __future__ import annotations

import os
import platform

import pytest
import torch

from zerounlearn_editor.support.memory import release_free_memory

glibc_only = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="malloc_trim is glibc's")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@glibc_only
def test_freed_small_blocks_leave_the_rss_and_live_ones_stay():
    # 64 KiB blocks come from the heap (below glibc's mmap threshold); keep one in eight, free the rest: the heap
    # cannot shrink from its top, so without a trim the freed pages stay in the RSS
    blocks = [torch.full((16 * 1024,), float(i)) for i in range(3000)]
    kept = blocks[::8]
    del blocks
    before = _rss_bytes()
    assert release_free_memory() is True
    after = _rss_bytes()
    assert before - after > 50 * 1024**2, (before, after)
    assert all(float(t[0]) == 8.0 * i and float(t[-1]) == 8.0 * i for i, t in enumerate(kept))


def test_release_is_harmless_when_repeated():
    x = torch.arange(10.0)
    for _ in range(3):
        release_free_memory()
    assert torch.equal(x, torch.arange(10.0))
