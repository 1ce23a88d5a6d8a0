"""Exact reuse of the unedited layers' output across the key reads of one edit.

The decoder layers before the first edited one never change during an edit, so their output for a chunk is
the same on every key read. :class:`LayerPrefixReplay` stores it on the first read and, on later reads,
swaps those layers for stand-ins returning it; the layers from the first edited one on run on the very same
tensor, so keys and hidden states are bit-identical to a full forward pass.

The stored outputs grow with the number of requests (rows x tokens x ``d_model``), so past ``memory_bytes`` they
go to a temporary folder (safetensors files, read back one chunk at a time, removed by :meth:`clear`): the memory
an edit holds stays flat in the batch size while the time saved stays.
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

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
    later reads of that chunk (checked against its ``input_ids``). The first ``memory_bytes`` of stored outputs
    stay in memory, the rest (plain tensors) go to files in a temporary folder (``spill_dir``, default the
    system's); past ``max_bytes`` in all, chunks are recomputed instead."""

    def __init__(self, model: nn.Module, layer_module_tmp: str, first: int, max_bytes: int = 2 * 1024**3,
                 memory_bytes: int = 4 * 1024**2, spill_dir: Optional[str] = None):
        self.first = int(first)
        self.max_bytes = int(max_bytes)  # stored outputs beyond this: those chunks are recomputed instead
        self.memory_bytes = int(memory_bytes)
        self._spill_parent = spill_dir
        self._spill: Optional[Path] = None
        self._bytes = 0
        self._memory = 0
        self._spill_failed = False  # no file could be written: later chunks stay in memory
        # chunk -> (input_ids, the output, or the file holding it and the output's device)
        self._stored: Dict[int, Tuple[torch.Tensor, Union[Any, Tuple[Path, torch.device]]]] = {}
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

    @property
    def spilled_bytes(self) -> int:
        """Bytes of stored outputs kept in files rather than in memory."""
        return self._bytes - self._memory

    def clear(self) -> None:
        """Drop every stored output and remove the files (after the edit's last read)."""
        self._stored.clear()
        self._bytes = self._memory = 0
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    def __del__(self) -> None:  # an edit that raised between reads still leaves no files behind
        if getattr(self, "_spill", None) is not None:
            shutil.rmtree(self._spill, ignore_errors=True)

    def _keep(self, chunk: int, input_ids: torch.Tensor, value: Any, size: int) -> None:
        """Store ``value`` (``size`` bytes) for ``chunk``: in memory within ``memory_bytes``, else a plain tensor in
        a file (in memory after all where no file can be written), else (a tuple past the memory budget) not at
        all."""
        ids = input_ids.detach().clone()
        if self._memory + size <= self.memory_bytes or (isinstance(value, torch.Tensor) and self._spill_failed):
            self._stored[chunk] = (ids, value)
            self._memory += size
        elif isinstance(value, torch.Tensor):
            try:
                self._stored[chunk] = (ids, (self._write(chunk, value), value.device))
            except OSError as exc:
                LOG.warning("prefix replay: cannot write to a temporary folder (%s); the stored layer outputs "
                            "stay in memory", exc)
                self._spill_failed = True
                self._stored[chunk] = (ids, value)
                self._memory += size
        else:
            return
        self._bytes += size

    def _write(self, chunk: int, value: torch.Tensor) -> Path:
        """Write one chunk's output to the spill folder (made on the first write); returns the file."""
        from safetensors.torch import save_file

        if self._spill is None:
            self._spill = Path(tempfile.mkdtemp(prefix="zerounlearn_replay_", dir=self._spill_parent))
        path = self._spill / f"chunk_{chunk}.safetensors"
        save_file({"output": value.detach().cpu().contiguous()}, str(path))
        return path

    def _value(self, stored: Any) -> Any:
        if isinstance(stored, tuple) and len(stored) == 2 and isinstance(stored[0], Path):
            from safetensors.torch import load_file

            path, device = stored
            return load_file(str(path))["output"].to(device)
        return stored

    @contextlib.contextmanager
    def around_forward(self, chunk: int, input_ids: torch.Tensor) -> Iterator[None]:
        """Wrap one forward pass of chunk ``chunk``: store layer ``first - 1``'s output, or replay it."""
        if not self.enabled:
            yield
            return
        stored = self._stored.get(chunk)
        if stored is not None and stored[0].shape == input_ids.shape and torch.equal(stored[0], input_ids):
            parent = self._parent
            value = self._value(stored[1])
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
                self._keep(chunk, input_ids, value, size)

        if self._bytes >= self.max_bytes:
            yield  # over the budget: this chunk is computed in full on every read
            return
        handle = self._skipped[-1].register_forward_hook(keep)
        try:
            yield
        finally:
            handle.remove()
