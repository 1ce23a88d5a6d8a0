"""Run a block with a model in eval mode (no dropout in keys, targets and statistics) and give every
submodule's own ``training`` flag back afterwards, also when the block raises."""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Tuple

from torch import nn


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model.eval()`` inside the block; each submodule's own ``training`` flag restored on exit."""
    flags: List[Tuple[nn.Module, bool]] = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in flags:
            module.training = training
