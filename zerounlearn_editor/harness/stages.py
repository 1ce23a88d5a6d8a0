"""Timed bench stages and the one stage every bench shares: the ``C0`` statistics of all methods.

Used by the bench runner (:mod:`.runner`), sequential rounds (:mod:`.rounds`), the utility bench
(:mod:`zerounlearn_editor.harness.utility`) and the PCA plot (:mod:`zerounlearn_editor.harness.pca_shift`).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, Sequence

from torch import nn

from zerounlearn_editor.engine.stats import StatsRequest, cached_second_moments
from zerounlearn_editor.harness.method_specs import HParamsLookup, PreparedMethod, StatsBank

__all__ = ["Stage", "compute_statistics"]

LOG = logging.getLogger(__name__)


class Stage:
    """Logs a stage's duration at INFO level and keeps it in ``seconds``."""

    def __init__(self, label: str):
        self.label = label
        self.seconds = 0.0

    def __enter__(self) -> "Stage":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.seconds = time.perf_counter() - self.start
        if exc[0] is None:
            LOG.info("%s: %.1fs", self.label, self.seconds)
        return False


def compute_statistics(
    model: nn.Module, tok: Any, lookup: HParamsLookup, prepared: Sequence[PreparedMethod], progress: bool
) -> StatsBank:
    """``C0`` for every layer any prepared method needs, one pass per module template."""
    wanted: Dict[str, set] = {}
    for method in prepared:
        if method.stats_layers and method.stats_module_tmp:
            wanted.setdefault(method.stats_module_tmp, set()).update(method.stats_layers)
    main = lookup.main
    bank: StatsBank = {}
    for template, layers in wanted.items():
        with Stage(f"C0 statistics for layers {sorted(layers)} ({template})"):
            request = StatsRequest.of_hparams(main, layers=sorted(layers), module_tmp=template, progress=progress)
            bank[template] = cached_second_moments(model, tok, request)
    return bank
