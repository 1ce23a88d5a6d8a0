"""Fixtures shared by the method tests."""
from __future__ import annotations

from typing import Iterator

import pytest
import torch


@pytest.fixture(scope="module")
def single_torch_thread() -> Iterator[None]:
    """One intra-op thread for a module of tiny matrices: fastest, and immune to a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
