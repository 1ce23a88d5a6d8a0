"""Exact reuse of the unedited layers' output across the key reads of one edit.

The decoder layers before the first edited one never change during an edit, so their output for a chunk is
the same on every key read. :class:`LayerPrefixReplay` stores it on the first read and, on later reads,
swaps those layers for stand-ins returning it; the layers from the first edited one on run on the very same
tensor, so keys and hidden states are bit-identical to a full forward pass.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from zerounlearn_editor.support.model_access import get_module

LOG = logging.getLogger(__name__)


class _Replay(nn.Module):
    """A stand-in for a skipped decoder layer: returns the stored output; other attributes (Qwen3's
    ``attention_type``) are the original layer's."""

    def __init__(self, original: nn.Module, value: Any):
        super().__init__()
        object.__setattr__(self, "_original", original)  # not a submodule: no parameters here
        object.__setattr__(self, "_value", value)

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D401 - replays
        return self._value

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(object.__getattribute__(self, "_original"), name)


class LayerPrefixReplay:
    """Output of decoder layer ``first - 1`` (``first`` the lowest edited layer) per chunk, replayed on the
    later reads of that chunk (checked against its ``input_ids``); stored outputs capped at ``max_bytes``."""

    def __init__(self, model: nn.Module, layer_module_tmp: str, first: int, max_bytes: int = 2 * 1024**3):
        self.first = int(first)
        self.max_bytes = int(max_bytes)  # stored outputs beyond this: those chunks are recomputed instead
        self._bytes = 0
        self._stored: Dict[int, Tuple[torch.Tensor, Any]] = {}
        self._parent: Optional[nn.ModuleList] = None
        self._skipped: List[nn.Module] = []
        if self.first <= 0:
            return
        try:
            parent_name, _, _ = layer_module_tmp.format(0).rpartition(".")
            parent = get_module(model, parent_name)
            layers = [get_module(model, layer_module_tmp.format(i)) for i in range(self.first)]
        except Exception:  # noqa: BLE001 - an unknown layout: every read stays a full forward pass
            LOG.debug("prefix replay disabled: layers %r not found", layer_module_tmp)
            return
        if not isinstance(parent, nn.ModuleList) or any(parent[i] is not layers[i] for i in range(self.first)):
            LOG.debug("prefix replay disabled: %r is not a ModuleList of the layers", parent_name)
            return
        self._parent, self._skipped = parent, layers

    @property
    def enabled(self) -> bool:
        return self._parent is not None

    def clear(self) -> None:
        """Drop every stored output (after the edit's last read)."""
        self._stored.clear()
        self._bytes = 0

    @contextlib.contextmanager
    def around_forward(self, chunk: int, input_ids: torch.Tensor) -> Iterator[None]:
        """Wrap one forward pass of chunk ``chunk``: store layer ``first - 1``'s output, or replay it."""
        if not self.enabled:
            yield
            return
        stored = self._stored.get(chunk)
        if stored is not None and stored[0].shape == input_ids.shape and torch.equal(stored[0], input_ids):
            parent = self._parent
            value = stored[1]
            try:
                for i, layer in enumerate(self._skipped):
                    parent[i] = _Replay(layer, value)
                yield
            finally:
                for i, layer in enumerate(self._skipped):
                    parent[i] = layer
            return

        def keep(_module: nn.Module, _args: Any, output: Any) -> None:
            # ``output`` (a tensor, or a tuple holding tensors) detached, and its tensors' size in bytes
            parts = output if isinstance(output, tuple) else (output,)
            detached = tuple(p.detach() if isinstance(p, torch.Tensor) else p for p in parts)
            value = detached if isinstance(output, tuple) else detached[0]
            size = sum(p.numel() * p.element_size() for p in parts if isinstance(p, torch.Tensor))
            if self._bytes + size <= self.max_bytes:
                self._stored[chunk] = (input_ids.detach().clone(), value)
                self._bytes += size

        if self._bytes >= self.max_bytes:
            yield  # over the budget: this chunk is computed in full on every read
            return
        handle = self._skipped[-1].register_forward_hook(keep)
        try:
            yield
        finally:
            handle.remove()
