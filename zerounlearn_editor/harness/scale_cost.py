"""What one block of a scale run costs (:class:`measure`, :class:`Cost`): wall and CPU seconds, the peak resident
memory above the level at the block's start (sampled RSS, which holds the model and the statistics already), split
by an edit's stages, and the peak of Python-level allocations (``tracemalloc``)."""
from __future__ import annotations

import dataclasses
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any, Dict

import torch

from zerounlearn_editor.engine.pipeline import EditReport
from zerounlearn_editor.harness.speed_measure import MemoryMeter
from zerounlearn_editor.support.memory import release_free_memory

__all__ = ["Cost", "measure"]


@dataclass
class Cost:
    """Wall / CPU seconds and peak memory of one block (:func:`measure`)."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    rss_peak_above_start_mb: float = 0.0
    rss_start_mb: float = 0.0
    tracemalloc_peak_mb: float = 0.0
    # per edit stage (``EditReport.stage_spans``): the RSS peak within it above the block's start, and the
    # largest rise within one of its spans (what the stage itself allocated beyond what was free), MB
    stage_rss_peak_above_start_mb: Dict[str, float] = dataclasses.field(default_factory=dict)
    stage_rss_rise_mb: Dict[str, float] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> Dict[str, float]:
        return dataclasses.asdict(self)


class measure:  # noqa: N801 - used as a context manager
    """Time a block and its peak memory: sampled RSS above the level at entry (the allocator's free pages handed
    back first, :func:`release_free_memory`) and ``tracemalloc``'s peak; :meth:`stage_peaks` splits the RSS
    peak by an :class:`EditReport`'s stages."""

    def __init__(self, trace_python: bool = True):
        self.cost = Cost()
        self.trace_python = trace_python

    def __enter__(self) -> Cost:
        release_free_memory()
        self._meter = MemoryMeter(torch.device("cpu"), trace=True).__enter__()
        self._owns_trace = self.trace_python and not tracemalloc.is_tracing()
        if self._owns_trace:
            tracemalloc.start()
        self._start = time.perf_counter()
        return self.cost

    def __exit__(self, *exc: Any) -> bool:
        self.cost.seconds = time.perf_counter() - self._start
        if self._owns_trace:
            self.cost.tracemalloc_peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        self._meter.__exit__(*exc)
        self.cost.cpu_seconds = self._meter.cpu_seconds
        self.cost.rss_start_mb = self._meter.start_bytes / 2**20
        self.cost.rss_peak_above_start_mb = max(0.0, (self._meter.peak_bytes - self._meter.start_bytes) / 2**20)
        return False

    def stage_peaks(self, report: EditReport) -> None:
        """Fill the cost's per-stage RSS figures from ``report.stage_spans`` (after the block)."""
        peaks = self._meter.peaks_in_spans(report.stage_spans)
        self.cost.stage_rss_peak_above_start_mb = {stage: round(p[0] / 2**20, 1) for stage, p in peaks.items()}
        self.cost.stage_rss_rise_mb = {stage: round(p[1] / 2**20, 1) for stage, p in peaks.items()}
