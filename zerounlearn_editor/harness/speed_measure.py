"""What the speed bench measures with: peak memory and CPU time of a block (:class:`MemoryMeter`), device
synchronisation, and randomly initialised models of real dimensions (:data:`RANDOM_CONFIGS`)."""
from __future__ import annotations

import os
import resource
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

__all__ = ["MemoryMeter", "RANDOM_CONFIGS", "build_random_model", "ru_maxrss_bytes", "sync_device"]

RANDOM_CONFIGS: Dict[str, Dict[str, Any]] = {
    # Llama-3.2-3B-Instruct's dimensions (random weights, bf16)
    "llama-3.2-3b": dict(
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=28,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128256,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        dtype="bfloat16",
    ),
    # a narrow Llama with SmolLM2's depth (any SmolLM2 YAML's layers exist), to check the code path on a CPU
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=30,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=49152,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        dtype="float32",
    ),
}


class MemoryMeter:
    """Peak memory while the ``with`` block runs: CUDA allocated bytes, or sampled CPU RSS.

    After the block: ``peak_bytes`` (absolute peak), ``start_bytes`` (at entry), ``kind``
    (``"cuda_allocated"``, ``"rss_sampled"`` or ``"ru_maxrss"``) and ``cpu_seconds`` (process
    CPU time spent in the block, all threads). With ``trace`` (sampled RSS only) ``samples`` keeps every
    ``(time.perf_counter(), rss bytes)`` reading, for :meth:`peaks_in_spans`.
    """

    def __init__(self, device: torch.device, interval: float = 0.01, trace: bool = False):
        self.device = torch.device(device)
        self.interval = interval
        self.trace = trace
        self.samples: List[Tuple[float, int]] = []
        self.peak_bytes = 0
        self.start_bytes = 0
        self.kind = ""
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._process = None
        self.cpu_seconds = 0.0
        self._cpu_start = 0.0

    def __enter__(self) -> "MemoryMeter":
        self._cpu_start = time.process_time()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.kind = "cuda_allocated"
            self.start_bytes = torch.cuda.memory_allocated(self.device)
            return self
        try:
            import psutil
        except ImportError:
            self.kind = "ru_maxrss"
            self.start_bytes = ru_maxrss_bytes()
            return self
        self.kind = "rss_sampled"
        self._process = psutil.Process(os.getpid())
        self.start_bytes = self.peak_bytes = self._process.memory_info().rss
        self._record(self.start_bytes)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _record(self, rss: int) -> None:
        self.peak_bytes = max(self.peak_bytes, rss)
        if self.trace:
            self.samples.append((time.perf_counter(), rss))

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._record(self._process.memory_info().rss)

    def __exit__(self, *exc) -> bool:
        self.cpu_seconds = time.process_time() - self._cpu_start
        if self.kind == "cuda_allocated":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device)
        elif self.kind == "rss_sampled":
            self._stop.set()
            self._thread.join()
            self._record(self._process.memory_info().rss)
        else:
            self.peak_bytes = ru_maxrss_bytes()
        return False

    def as_dict(self) -> Dict[str, Any]:
        return {
            "cpu_s": self.cpu_seconds,
            "peak_mb": round(self.peak_bytes / 2**20, 1),
            "peak_delta_mb": round((self.peak_bytes - self.start_bytes) / 2**20, 1),
            "memory_kind": self.kind,
        }


    def peaks_in_spans(self, spans: Sequence[Tuple[str, float, float]]) -> Dict[str, Tuple[int, int]]:
        """Per stage name over its ``(stage, start, end)`` spans: ``(highest traced RSS in a span minus
        start_bytes, largest rise within one span: its highest sample minus the last sample before it)``, bytes,
        each >= 0; stages with no sample inside a span are left out."""
        peaks: Dict[str, Tuple[int, int]] = {}
        for stage, start, end in spans:
            before = [rss for t, rss in self.samples if t < start]
            inside = [rss for t, rss in self.samples if start <= t <= end]
            if not inside:
                continue
            top = max(inside)
            base = before[-1] if before else inside[0]
            above, rise = peaks.get(stage, (0, 0))
            peaks[stage] = (max(above, top - self.start_bytes, 0), max(rise, top - base, 0))
        return peaks


def ru_maxrss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_random_model(name: str, device: str, vocab_size: Optional[int] = None) -> nn.Module:
    """A randomly initialised Llama with the dimensions of :data:`RANDOM_CONFIGS` ``[name]``.

    ``vocab_size`` overrides the config's (the ``tiny`` config uses the tokenizer's size).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if name not in RANDOM_CONFIGS:
        raise ValueError(f"unknown random config {name!r}; choose from {sorted(RANDOM_CONFIGS)}")
    spec = dict(RANDOM_CONFIGS[name])
    dtype = getattr(torch, spec.pop("dtype"))
    rope_theta = spec.pop("rope_theta")
    if vocab_size is not None:
        spec["vocab_size"] = vocab_size
    config = LlamaConfig(**spec, rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    model.config._name_or_path = f"random-{name}"
    return model.eval()
