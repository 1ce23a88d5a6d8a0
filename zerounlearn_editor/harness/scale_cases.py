"""The cases a scale run edits per seed (:func:`draw_cases`): a seeded draw, or the known cases only, one case per
prompt (:func:`one_request_per_prompt`), neighbour probes that a drawn case forgets dropped."""
from __future__ import annotations

import itertools
import logging
import random
from pathlib import Path
from typing import Callable, List, Sequence, Tuple

from zerounlearn_editor.data.datasets import sample_cases
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours
from zerounlearn_editor.harness.scale_config import ScaleConfig
from zerounlearn_editor.harness.scale_setup import ScaleRun, ScaleSetup
from zerounlearn_editor.harness.stages import Stage
from zerounlearn_editor.harness.stored_settings import as_stored
from zerounlearn_editor.support.files import read_json, write_json_atomic

__all__ = ["one_request_per_prompt", "draw_cases"]

LOG = logging.getLogger(__name__)


def one_request_per_prompt(cases: Sequence[UnlearnCase], spare: Sequence[UnlearnCase]) -> Tuple[List[UnlearnCase], int]:
    """``cases`` without any case whose (prompt, subject) an earlier case already has, topped up at the end with
    the first ``spare`` cases of unused prompts; returns ``(cases, replaced)``.

    A dataset can hold one prompt twice with two answers (CounterFact val: "Lyon ... twin city" -> Santiago and
    Florence); an edit takes one request per prompt (answer-suppression targets refuse the pair). Dropped cases
    are replaced at the end, so the first cases up to the first repeat stay where they are (stored rows of smaller
    n keep their sample).
    """
    seen = set()
    out: List[UnlearnCase] = []
    replaced = 0
    for index, case in enumerate(itertools.chain(cases, spare)):  # every drawn case first, then spares
        if len(out) == len(cases):
            break
        key = (case.request["prompt"], case.request["subject"])
        if key in seen:
            replaced += index < len(cases)
            continue
        seen.add(key)
        out.append(case)
    if replaced:
        LOG.info("%d drawn case(s) repeat an earlier case's prompt; replaced by the next unused case(s)", replaced)
    return out, replaced


def sampled_cases(pool: Sequence[UnlearnCase], total: int, seed: int) -> Tuple[List[UnlearnCase], int]:
    """A scale run's seeded draw without ``known_only`` (no model needed): ``sample_cases(pool, total, seed)``, one
    case per prompt (repeats replaced from the pool shuffled with ``seed``), cases in another's neighbourhood
    dropped; returns the cases and how many were dropped."""
    shuffled = random.Random(seed).sample(list(pool), len(pool))
    drawn, _ = one_request_per_prompt(sample_cases(list(pool), total, seed), shuffled)
    return drop_batch_forget_neighbours(drawn)


def draw_cases(
    config: ScaleConfig, run: ScaleRun, total: int, seed: int, need_model: Callable[[], ScaleSetup]
) -> Tuple[List[UnlearnCase], int]:
    """The seed's ``total`` cases: ``sample_cases(pool, total, seed)``, or with ``known_only`` the first ``total``
    known cases of the pool shuffled with ``seed`` (the selection cached in ``<out>/known_seed_<seed>.json``, keyed
    by the run's settings; ``need_model`` loads the model only when the selection has to be computed). Either way
    one case per prompt (:func:`one_request_per_prompt`)."""
    pool = run.pool
    if len(pool) < total:
        raise BenchConfigError(f"bench-scale: {total} cases needed, {config.data} has {len(pool)}")
    if not config.known_only:
        return sampled_cases(pool, total, seed)
    shuffled = random.Random(seed).sample(pool, len(pool))
    path = Path(config.out) / f"known_seed_{seed}.json"
    key = as_stored({k: run.settings[k] for k in ("model", "data_sha256", "known_min_accuracy")})
    key.update(pool=len(pool), order="shuffled, one per prompt")
    stored = read_json(path) if path.exists() else {}
    if stored.get("key") == key and len(stored.get("case_ids", [])) >= total:
        by_id = {c.case_id: c for c in pool}
        return drop_batch_forget_neighbours([by_id[i] for i in stored["case_ids"][:total]])
    setup = need_model()
    order, _ = one_request_per_prompt(shuffled, [])
    with Stage(f"seed {seed}: selecting {total} known cases (forget-prompt accuracy >= {config.known_min_accuracy})"):
        try:
            chosen = select_known_cases(setup.model, setup.tok, order, total, min_accuracy=config.known_min_accuracy,
                                        batch_size=config.eval_batch_size)
        except ValueError as exc:
            raise BenchConfigError(
                f"bench-scale --known-only: {exc}; ask for fewer facts or lower --known-threshold"
            ) from None
    write_json_atomic(path, {"key": key, "case_ids": [c.case_id for c in chosen]})
    return drop_batch_forget_neighbours(chosen)
