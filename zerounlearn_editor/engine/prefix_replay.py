"""Exact reuse of the unedited layers' output across the key reads of one edit.

The decoder layers before the first edited one never change during an edit, so their output for a chunk is
the same on every key read. :class:`LayerPrefixReplay` stores it on the first read and, on later reads,
swaps those layers for stand-ins returning it; the layers from the first edited one on run on the very same
tensor, so keys and hidden states are bit-identical to a full forward pass.

The replay can also **advance** with the edit (:meth:`LayerPrefixReplay.store_next`, then ``advance``): while
layer ``l`` is read, the output of layer ``l - 1`` is stored too (every layer below ``l`` already has its final
weight then), and the reads after ``l``'s write-back replay it, so they start at layer ``l``. The replayed tensor
is what a full forward pass of the same chunk computes, so the results stay bit-identical.

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


class _Store:
    """Stored layer outputs per chunk (``chunk -> (input_ids, output or (file, device))``): the first ``memory_bytes``
    in memory, the rest (plain tensors) in files of a temporary folder, nothing past ``max_bytes``."""

    def __init__(self, max_bytes: int, memory_bytes: int, spill_parent: Optional[str], spill_failed: bool = False):
        self.max_bytes, self.memory_bytes, self.spill_parent = max_bytes, memory_bytes, spill_parent
        self.entries: Dict[int, Tuple[torch.Tensor, Union[Any, Tuple[Path, torch.device]]]] = {}
        self.sizes: Dict[int, int] = {}
        self.bytes = self.memory = 0
        self.spill: Optional[Path] = None
        self.spill_failed = spill_failed  # no file could be written: later chunks stay in memory

    def keep(self, chunk: int, input_ids: torch.Tensor, value: Any, size: int) -> None:
        """Store ``value`` (``size`` bytes) for ``chunk``: in memory within ``memory_bytes``, else a plain tensor in
        a file (in memory after all where no file can be written), else (a tuple past the memory budget) not at
        all."""
        self.drop(chunk)  # a chunk read again with other tokens: its old output goes
        ids = input_ids.detach().clone()
        if self.memory + size <= self.memory_bytes or (isinstance(value, torch.Tensor) and self.spill_failed):
            self.entries[chunk] = (ids, value)
            self.memory += size
        elif isinstance(value, torch.Tensor):
            try:
                self.entries[chunk] = (ids, (self._write(chunk, value), value.device))
            except OSError as exc:
                LOG.warning("prefix replay: cannot write to a temporary folder (%s); the stored layer outputs "
                            "stay in memory", exc)
                self.spill_failed = True
                self.entries[chunk] = (ids, value)
                self.memory += size
        else:
            return
        self.sizes[chunk] = size
        self.bytes += size

    def _write(self, chunk: int, value: torch.Tensor) -> Path:
        """Write one chunk's output to the spill folder (made on the first write); returns the file."""
        from safetensors.torch import save_file

        if self.spill is None:
            self.spill = Path(tempfile.mkdtemp(prefix="zerounlearn_replay_", dir=self.spill_parent))
        path = self.spill / f"chunk_{chunk}.safetensors"
        save_file({"output": value.detach().cpu().contiguous()}, str(path))
        return path

    def get(self, chunk: int, input_ids: torch.Tensor) -> Optional[Any]:
        """``chunk``'s stored output (read back from its file) when its ``input_ids`` are these, else None."""
        stored = self.entries.get(chunk)
        if stored is None or stored[0].shape != input_ids.shape or not torch.equal(stored[0], input_ids):
            return None
        value = stored[1]
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Path):
            from safetensors.torch import load_file

            path, device = value
            return load_file(str(path))["output"].to(device)
        return value

    def drop(self, chunk: int) -> None:
        """Forget ``chunk``'s output (and remove its file)."""
        stored = self.entries.pop(chunk, None)
        if stored is None:
            return
        size = self.sizes.pop(chunk)
        self.bytes -= size
        if isinstance(stored[1], tuple) and len(stored[1]) == 2 and isinstance(stored[1][0], Path):
            stored[1][0].unlink(missing_ok=True)
        else:
            self.memory -= size

    def clear(self) -> None:
        """Drop every stored output and remove the folder."""
        self.entries.clear()
        self.sizes.clear()
        self.bytes = self.memory = 0
        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)
            self.spill = None

    def __del__(self) -> None:  # an edit that raised between reads still leaves no files behind
        if getattr(self, "spill", None) is not None:
            shutil.rmtree(self.spill, ignore_errors=True)


class LayerPrefixReplay:
    """Output of decoder layer ``first - 1`` (``first`` the lowest edited layer) per chunk, replayed on the
    later reads of that chunk (checked against its ``input_ids``). The first ``memory_bytes`` of stored outputs
    stay in memory, the rest (plain tensors) go to files in a temporary folder (``spill_dir``, default the
    system's); past ``max_bytes`` in all, chunks are recomputed instead. :meth:`store_next` / :meth:`advance`
    move ``first`` up (module docstring); while a read stores the next layer's outputs, each chunk's replayed
    output is dropped once replayed, so at most about one layer's outputs are held."""

    def __init__(self, model: nn.Module, layer_module_tmp: str, first: int, max_bytes: int = 2 * 1024**3,
                 memory_bytes: int = 4 * 1024**2, spill_dir: Optional[str] = None):
        self.first = int(first)
        self.max_bytes = int(max_bytes)  # stored outputs beyond this: those chunks are recomputed instead
        self.memory_bytes = int(memory_bytes)
        self._spill_parent = spill_dir
        self._store = _Store(self.max_bytes, self.memory_bytes, spill_dir)
        self._next: Optional[_Store] = None  # outputs of layer ``_next_first - 1``, stored by the current reads
        self._next_first = self.first
        self._model, self._tmp = model, layer_module_tmp
        self._parent: Optional[nn.ModuleList] = None
        self._skipped: List[nn.Module] = []
        if self.first <= 0:
            return
        layers = self._layers_below(self.first)
        if layers is None:
            return
        self._parent, self._skipped = get_module(model, layer_module_tmp.format(0).rpartition(".")[0]), layers

    def _layers_below(self, first: int) -> Optional[List[nn.Module]]:
        """Decoder layers ``0 .. first - 1`` when they are the first entries of one ``ModuleList``, else None."""
        modules = dict(self._model.named_modules())  # once: get_module walks the model on every call
        try:
            parent_name, _, _ = self._tmp.format(0).rpartition(".")
            parent = modules[parent_name]
            layers = [modules[self._tmp.format(i)] for i in range(first)]
        except (KeyError, IndexError, ValueError):  # an unknown layout: every read stays a full forward pass
            LOG.debug("prefix replay disabled: layers %r not found", self._tmp)
            return None
        if not isinstance(parent, nn.ModuleList) or any(parent[i] is not layers[i] for i in range(first)):
            LOG.debug("prefix replay disabled: %r is not a ModuleList of the layers", parent_name)
            return None
        return layers

    @property
    def enabled(self) -> bool:
        return self._parent is not None

    @property
    def spilled_bytes(self) -> int:
        """Bytes of stored outputs kept in files rather than in memory."""
        stores = [self._store] + ([self._next] if self._next is not None else [])
        return sum(store.bytes - store.memory for store in stores)

    def store_next(self, first: int) -> None:
        """The next reads also store layer ``first - 1``'s output (every layer below ``first`` must keep its
        weight from then on); :meth:`advance` replays it. A ``first`` at or below the current one, or beyond the
        layers found, changes nothing."""
        if not self.enabled or first <= self.first or self._layers_below(first) is None:
            return
        if self._next is not None:
            self._next.clear()
        self._next = _Store(self.max_bytes, self.memory_bytes, self._spill_parent, self._store.spill_failed)
        self._next_first = int(first)

    def advance(self) -> None:
        """Replay what the reads since :meth:`store_next` stored: later reads start at its ``first``."""
        if self._next is None:
            return
        self._store.clear()
        self._store, self._next = self._next, None
        self.first = self._next_first
        self._skipped = self._layers_below(self.first) or []

    def clear(self) -> None:
        """Drop every stored output and remove the files (after the edit's last read)."""
        self._store.clear()
        if self._next is not None:
            self._next.clear()
            self._next = None
        self._next_first = self.first

    @contextlib.contextmanager
    def around_forward(self, chunk: int, input_ids: torch.Tensor) -> Iterator[None]:
        """Wrap one forward pass of chunk ``chunk``: store the output of layer ``first - 1`` (after
        :meth:`store_next`: of its layer), or replay it."""
        if not self.enabled:
            yield
            return
        value = self._store.get(chunk, input_ids)
        target = self._store if self._next is None else self._next
        storing = target is not self._store or value is None
        with self._storing(chunk, input_ids, target) if storing else contextlib.nullcontext():
            if value is None:
                yield
                return
            if self._next is not None:
                self._store.drop(chunk)  # replayed once: its successor is being stored
            with self._replaying(value):
                yield

    @contextlib.contextmanager
    def _replaying(self, value: Any) -> Iterator[None]:
        """Layers ``0 .. first - 1`` swapped for stand-ins returning ``value`` (the stored output)."""
        parent = self._parent
        try:
            for i, layer in enumerate(self._skipped):
                parent[i] = _Replay(layer, value)
            yield
        finally:
            for i, layer in enumerate(self._skipped):
                parent[i] = layer

    @contextlib.contextmanager
    def _storing(self, chunk: int, input_ids: torch.Tensor, store: _Store) -> Iterator[None]:
        """A hook on the layer below the storing level (``first``, or :meth:`store_next`'s) keeping its output
        in ``store``; nothing when ``store`` is over its budget."""
        if store.bytes >= store.max_bytes:
            yield  # over the budget: this chunk is computed in full on every read
            return
        level = self._next_first if store is self._next else self.first
        layer = self._parent[level - 1] if level - 1 >= len(self._skipped) else self._skipped[level - 1]

        def keep(_module: nn.Module, _args: Any, output: Any) -> None:
            # ``output`` (a tensor, or a tuple holding tensors) detached, and its tensors' size in bytes
            parts = output if isinstance(output, tuple) else (output,)
            detached = tuple(p.detach() if isinstance(p, torch.Tensor) else p for p in parts)
            kept = detached if isinstance(output, tuple) else detached[0]
            size = sum(p.numel() * p.element_size() for p in parts if isinstance(p, torch.Tensor))
            if store.bytes + size <= store.max_bytes:
                store.keep(chunk, input_ids, kept, size)

        handle = layer.register_forward_hook(keep)
        try:
            yield
        finally:
            handle.remove()
