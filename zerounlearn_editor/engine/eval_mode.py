"""Run a block with a model in eval mode and give the caller's train/eval flags back afterwards.

Keys, targets and statistics must be read without dropout: a model left in ``.train()`` (GPT-2's
dropout 0.1) would otherwise get another edit on every call. :func:`eval_mode` records every
submodule's ``training`` flag (a caller may mix modes, e.g. a frozen, eval-mode backbone inside a
training wrapper) and restores each one, also when the block raises.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Tuple

from torch import nn

__all__ = ["eval_mode"]


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
