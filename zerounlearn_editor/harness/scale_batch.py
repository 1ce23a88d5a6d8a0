"""``zerounlearn bench-scale batch``: one batch of n = 200 ... 1,000 facts (:func:`run_scale_batch`).

Per seed the ``max(ns)`` cases are drawn once (:func:`~zerounlearn_editor.harness.scale_cases.draw_cases`) and the row
for ``n`` edits the first ``n`` of them, so the rows are nested (the 200 facts of the n = 200 row are the first 200
of the n = 1,000 row). (``random.sample`` draws a smaller sample as a prefix of a larger one when both use the same
of its two algorithms, e.g. n = 200 and 1,000 of the 9,484-record train file; not in general, so the row for ``n`` is
not always ``sample_cases(cases, n, seed)``.) Neutral targets are optimised on the unedited model, per fact
independently of the other facts, so they are computed once per seed for all ``max(ns)`` facts, in chunks of
``target_chunk`` cached on disk (:class:`~zerounlearn_editor.harness.scale_targets.TargetCache`; atomically written, so
a killed run resumes at the next chunk) and sliced for every row and every YAML with the same target settings. Each
row ``(hparams, n)`` is ``<out>/seed_<s>/<tag>_n<n>.json`` (atomic); a rerun skips rows already there.

Cost columns: the edit's stage seconds (``report.timings``; targets from the cache files' own times), CPU seconds
and peak memory (:mod:`~zerounlearn_editor.harness.scale_cost`).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.engine.hparams import EditHyperParams
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.case_scoring import score_cases
from zerounlearn_editor.harness.scale_cases import draw_cases
from zerounlearn_editor.harness.scale_config import ScaleConfig
from zerounlearn_editor.harness.scale_metrics import known_mask, scale_metrics
from zerounlearn_editor.harness.scale_report import write_batch_summary
from zerounlearn_editor.harness.scale_rows import BATCH_ROWS, batch_row_path
from zerounlearn_editor.harness.scale_setup import (
    ScaleRun,
    ScaleSetup,
    edit_once,
    load_setup,
    perplexity,
    prepare_run,
    record_head,
)
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.harness.stages import Stage
from zerounlearn_editor.support.files import read_json, write_json_atomic

__all__ = ["run_scale_batch"]

LOG = logging.getLogger(__name__)


def _rows_to_run(
    out: Path, seed: int, run: ScaleRun, ns: Sequence[int], cases: Sequence[UnlearnCase]
) -> List[Tuple[EditHyperParams, str, int]]:
    """``(hparams, tag, n)`` of every row of ``seed`` not stored yet; a stored row of other cases (other data or
    seed) is refused."""
    todo = []
    for hp, tag in zip(run.hps, run.tags):
        for n in ns:
            path = batch_row_path(out, seed, tag, n)
            if not path.exists():
                todo.append((hp, tag, n))
            elif read_json(path).get("case_ids") != [c.case_id for c in cases[:n]]:
                raise BenchConfigError(f"bench-scale: {path} holds another sample of cases (other data or seed); "
                                       "use another --out or remove it")
    return todo


def _batch_row(
    config: ScaleConfig, run: ScaleRun, setup: ScaleSetup, cache: TargetCache, seed: int, row: Tuple[Any, str, int],
    cases: Sequence[UnlearnCase], dropped: Any, pre: Sequence[CaseScores],
) -> Dict[str, Any]:
    """The row ``(hparams, tag, n)``: targets (cached), one edit of the first ``n`` cases, scores and perplexity, the
    weights restored (checked bit-identical); ``pre``: the unedited model's scores of at least ``n`` cases."""
    hp, tag, n = row
    requests = [dict(c.request) for c in cases[:n]]
    known = known_mask(pre[:n], config.known_min_accuracy)
    with Stage(f"seed {seed}: targets of {n} facts ({tag})"):
        targets, target_seconds, _ = cache.get(setup.model, setup.tok, hp, requests, config.target_chunk)
    setup.fingerprint.verify(setup.model, f"seed {seed}: before {tag} n={n}")
    with Stage(f"seed {seed}: {tag} edit of {n} facts") as stage:
        weights_copy, details, cost = edit_once(setup, hp, requests, targets)
    try:
        with Stage(f"seed {seed}: {tag} n={n} evaluation") as evaluation:
            post = score_cases(setup.model, setup.tok, cases[:n], config.eval_batch_size)
            ppl = perplexity(setup)
    finally:
        restore_weights(setup.model, weights_copy)
    setup.fingerprint.verify(setup.model, f"seed {seed}: after restoring {tag} n={n}")
    metrics = scale_metrics(post, pre[:n], known)
    base = scale_metrics(pre[:n], pre[:n], known)
    timings = dict(details.pop("timings"), targets=target_seconds)
    target_cpu = cache.last_cpu_seconds
    return {
        **record_head(config, run, setup, tag),
        "seed": seed,
        "n": n,
        "case_ids": [c.case_id for c in cases[:n]],
        "neighbours_dropped": dropped,
        "base": dict(base, ppl=setup.base_ppl),
        "metrics": dict(metrics, ppl=ppl),
        "stages_seconds": timings,
        "edit_seconds_with_cached_targets": stage.seconds,
        "end_to_end_seconds": stage.seconds + target_seconds,
        "edit_cost": cost.as_dict(),
        "targets_cpu_seconds": target_cpu,
        "end_to_end_cpu_seconds": cost.cpu_seconds + target_cpu,
        "eval_seconds": evaluation.seconds,
        "details": details,
        "threads": torch.get_num_threads(),
    }


def run_scale_batch(config: ScaleConfig, model: Optional[nn.Module] = None, tok: Any = None) -> Dict[str, Any]:
    """Run (or resume) one-batch rows for every seed, YAML and ``n``; returns and writes the summary.

    A stored row is resumed only when made with this run's settings
    (:func:`~zerounlearn_editor.harness.scale_rows.run_settings`, the YAML's content hash); any other stored row of
    ``out`` (they all go into one table) must share the run's settings too."""
    if config.rounds != 1:
        raise BenchConfigError(f"bench-scale batch: rounds is a stream setting (got {config.rounds}); a batch has none")
    run = prepare_run(config, BATCH_ROWS)
    out = Path(config.out)
    ns = sorted(set(config.ns))
    setup: Optional[ScaleSetup] = None

    def need() -> ScaleSetup:
        nonlocal setup
        setup = setup or load_setup(config, run.hps, model, tok, BATCH_ROWS)
        return setup
    for seed in config.seeds:
        cases, dropped = draw_cases(config, run, ns[-1], seed, need)
        todo = _rows_to_run(out, seed, run, ns, cases)
        if not todo:
            LOG.info("seed %d: every row done", seed)
            continue
        setup = need()
        if setup.base_ppl is None:
            setup.base_ppl = perplexity(setup)
        cache = TargetCache(out / "targets", setup.fingerprint)
        pre: List[CaseScores] = []
        for hp, tag, n in sorted(todo, key=lambda item: item[2]):  # smaller rows first: partial results early
            if len(pre) < n:
                with Stage(f"seed {seed}: scoring the unedited model on cases {len(pre) + 1}-{n}"):
                    pre += score_cases(setup.model, setup.tok, cases[len(pre):n], config.eval_batch_size)
            record = _batch_row(config, run, setup, cache, seed, (hp, tag, n), cases, dropped, pre)
            write_json_atomic(batch_row_path(out, seed, tag, n), record)
            metrics = record["metrics"]
            LOG.info("seed %d %s n=%d: Eff %.1f (first %.1f) Spe %.1f PPL %s", seed, tag, n, metrics["eff"],
                     metrics["eff_first"], metrics["spe"], metrics["ppl"])
    return write_batch_summary(out)
