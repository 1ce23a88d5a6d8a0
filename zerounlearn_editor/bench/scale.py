"""Unlearning at scale: one batch of n = 200 ... 1,000 facts, and streams of R rounds x n facts.

``zerounlearn bench-scale batch`` (:func:`run_scale_batch`) and ``zerounlearn bench-scale stream``
(:func:`run_scale_stream`), for the YAMLs of registered methods (one or more ``hparams`` files).

**Batch.** Per seed the ``max(ns)`` cases are drawn once (``sample_cases(cases, max(ns), seed)``)
and the row for ``n`` edits the first ``n`` of them, so the rows are nested (the 200 facts of the
n = 200 row are the first 200 of the n = 1,000 row). (``random.sample`` draws a smaller sample as a
prefix of a larger one when both use the same of its two algorithms, e.g. n = 200 and 1,000 of the
9,484-record train file; not in general, so the row for ``n`` is not always ``sample_cases(cases, n, seed)``.)
Neutral targets are optimised on the unedited model, per fact independently of the other facts, so they are
computed once per seed for all
``max(ns)`` facts, in chunks of ``target_chunk`` cached on disk (safetensors, keyed by the requests,
the target settings and the model's fingerprint; atomically written, so a killed run resumes at
the next chunk) and sliced for every row and every YAML with the same target settings. Each row
``(hparams, n)`` is ``<out>/seed_<s>/<tag>_n<n>.json`` (atomic); a rerun skips rows already there.

**Stored settings.** Every row and stream records the settings that change its numbers (:func:`run_settings` and the
YAML's content hash); a rerun under other settings is refused before the model loads, naming each differing one
(:mod:`~zerounlearn_editor.bench.stored_settings`, the check the bench uses for its seed files), and one on other
weights under the same model name once the model is loaded (``model_sha256``).

**Stream.** Per seed ``R * n`` cases are drawn and cut into ``R`` chunks; round ``k`` edits chunk
``k`` on the model left by rounds ``1..k-1`` (targets and keys from that model, ``C0`` of the
unedited model). After every round the round-1 facts and the round's own facts are scored; every
``eval_every`` rounds and after the last one, all facts forgotten so far and the perplexity too.
Each round writes ``<out>/seed_<s>/<tag>/round_<k>.json`` and the edited layers' weights
(``weights_round_<k>.safetensors``; the previous round's files are then removed); a rerun loads the newest round
that has both and continues there.

**Columns** (:func:`scale_metrics`): Eff, Eff first token (token accuracy of the first answer token
only), Gen, Spe (and % of the unedited model's, in the summary), PPL, each probe column also on the
**known subset**: cases whose forget prompt the unedited model answers at token accuracy >=
``known_min_accuracy`` (0.5). Cost columns: the edit's stage seconds (``report.timings``; targets
from the cache files' own times), peak resident memory above the level at the stage's start
(sampled RSS, which holds the model and the statistics already) and the peak of Python-level
allocations (``tracemalloc``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import random
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.bench.case_scoring import (
    ScoringSettings,
    model_metrics,
    ppl_token_count,
    probe_metrics,
    score_cases,
)
from zerounlearn_editor.bench.config import BenchConfigError
from zerounlearn_editor.bench.fingerprint import ModelFingerprint
from zerounlearn_editor.bench.neighbours import drop_batch_forget_neighbours
from zerounlearn_editor.bench.speed_measure import MemoryMeter
from zerounlearn_editor.bench.stages import Stage
from zerounlearn_editor.bench.stored_settings import as_stored, refuse_other_settings, settings_differences
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.engine.hparams import EditHyperParams
from zerounlearn_editor.engine.pipeline import EditReport, neutral_targets, restore_weights, target_settings
from zerounlearn_editor.engine.stats import SecondMoment, StatsRequest, cached_second_moments
from zerounlearn_editor.engine.targets import NeutralTargets
from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.evaluation.perplexity import read_text
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.support.files import (
    read_json,
    sha256_of_file,
    sha256_of_json,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from zerounlearn_editor.support.memory import release_free_memory
from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = [
    "KNOWN_MIN_ACCURACY",
    "ScaleConfig",
    "PROBE_COLUMNS",
    "known_mask",
    "scale_metrics",
    "TargetCache",
    "run_scale_batch",
    "run_scale_stream",
    "run_settings",
    "cases_sha256",
    "format_batch_table",
    "format_stream_table",
]

LOG = logging.getLogger(__name__)

PROBE_COLUMNS = ("eff", "eff_first", "gen", "gen_first", "spe")
"""Probe metrics reported on all cases and on the known subset (``<key>_known``)."""


KNOWN_MIN_ACCURACY = 0.5
"""A case is *known* when the unedited model's argmax gives at least this share of its forget prompts' answer
tokens (teacher-forced): the known subset the scale tables report."""


@dataclass
class ScaleConfig:
    """One scale run.

    Attributes:
        hparams: ZeroUnlearn / ZeroUnlearn-GD YAML files; the first one's model and statistics
            settings are used for all (the others must share them).
        data: dataset name or data file (as ``zerounlearn bench --data``); ``data_path``: with a name.
        seeds: sampling seeds.
        out: output folder.
        ns: batch sizes (batch runs) or ``[n]`` facts per round (stream runs).
        rounds: stream rounds (stream runs only).
        eval_every: stream runs score every forgotten fact and the perplexity every so many rounds
            (and after the last round); the round-1 facts are scored after every round.
        ppl_tokens: WikiText-2 tokens for perplexity (0 = none); ``ppl_text``: another text file.
        eval_batch_size: probes per forward pass.
        known_min_accuracy: forget-prompt token accuracy of the unedited model that makes a case "known".
        target_chunk: facts per cached target file (batch runs).
        known_only: draw only known cases (as the known subset: forget-prompt accuracy >= ``known_min_accuracy``).
        device: where the model is loaded.
    """

    hparams: List[str]
    data: str
    seeds: List[int]
    out: str
    ns: List[int]
    rounds: int = 1
    eval_every: int = 10
    ppl_tokens: int = 20000
    eval_batch_size: int = 32
    known_min_accuracy: float = KNOWN_MIN_ACCURACY
    target_chunk: int = 50
    known_only: bool = False
    data_path: Optional[str] = None
    ppl_text: Optional[str] = None
    device: str = "cpu"

    def validate(self) -> None:
        """Value ranges; every YAML must exist."""
        if not self.hparams:
            raise BenchConfigError("bench-scale: no --hparams given")
        for path in self.hparams:
            if not Path(path).is_file():
                raise BenchConfigError(f"bench-scale: hparams file {path} not found")
        if not self.ns or any(n < 1 for n in self.ns):
            raise BenchConfigError(f"bench-scale: --n must be positive integers, got {self.ns}")
        if self.rounds < 1 or self.eval_every < 1 or self.target_chunk < 1:
            raise BenchConfigError("bench-scale: --rounds, --eval-every and --target-chunk must be >= 1")
        if self.ppl_tokens < 0 or self.eval_batch_size < 1:
            raise BenchConfigError("bench-scale: --ppl-tokens must be >= 0 and --batch-size >= 1")
        if not 0.0 < self.known_min_accuracy <= 1.0:
            raise BenchConfigError(f"bench-scale: known_min_accuracy must be in (0, 1], got {self.known_min_accuracy}")
        if not self.seeds:
            raise BenchConfigError("bench-scale: no seed given")


# ----------------------------------------------------------------------------------------- metrics

def known_mask(pre: Sequence[CaseScores], min_accuracy: float = KNOWN_MIN_ACCURACY) -> List[bool]:
    """Per case: the unedited model's mean forget-prompt token accuracy is ``>= min_accuracy``."""
    return [bool(s.forget["acc"]) and fmean(s.forget["acc"]) >= min_accuracy for s in pre]


def scale_metrics(post: Sequence[CaseScores], pre: Sequence[CaseScores], known: Sequence[bool]) -> Dict[str, Any]:
    """:func:`probe_metrics` of all cases plus ``<col>_known`` for :data:`PROBE_COLUMNS` over the known cases.

    ``known_count`` is the number of known cases; without any the ``_known`` columns are absent.
    """
    if not (len(post) == len(pre) == len(known)):
        raise ValueError(f"post ({len(post)}), pre ({len(pre)}) and known ({len(known)}) must have one entry per case")
    out: Dict[str, Any] = dict(probe_metrics(post, pre))
    keep = [i for i, k in enumerate(known) if k]
    out["known_count"] = len(keep)
    if keep:
        sub = probe_metrics([post[i] for i in keep], [pre[i] for i in keep])
        out.update({f"{k}_known": sub[k] for k in PROBE_COLUMNS})
    return out


# ------------------------------------------------------------------------------------ measurement

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


# ----------------------------------------------------------------------------------- the method

def _load_method(path: str) -> Tuple[EditHyperParams, Callable[..., Any]]:
    """``(hparams, apply function)`` of a registered method's YAML (by its ``alg_name``)."""
    from zerounlearn_editor.engine.hparams import HParamsError
    from zerounlearn_editor.methods.registry import load_method

    try:
        return load_method(path)
    except HParamsError as exc:
        raise BenchConfigError(f"bench-scale: {exc}") from None


def _load_method_apply(hp: EditHyperParams) -> Callable[..., Any]:
    """The registered apply function of ``hp``'s method (:mod:`zerounlearn_editor.methods.registry`)."""
    from zerounlearn_editor.methods.registry import get_method

    return get_method(hp.alg_name).apply


def _tag(path: str) -> str:
    """A file-name tag for a YAML: its parent folder and stem (``ZeroUnlearn-GD_SmolLM2-135M-Instruct``), the folder
    taken from the absolute path (``many.yaml`` in the working directory ``runs/``: ``runs_many``). Never starts
    with ``_`` or ``.`` (matplotlib leaves a label starting with ``_`` out of the legend)."""
    p = Path(os.path.abspath(path))
    return f"{p.parent.name}_{p.stem}".lstrip("_.") or "hparams"


@dataclass
class _Setup:
    model: nn.Module
    tok: Any
    hps: List[EditHyperParams]
    moments: Dict[str, Dict[int, SecondMoment]]  # module template -> layer -> C0
    fingerprint: ModelFingerprint
    settings: ScoringSettings
    base_ppl: Optional[float] = None
    ppl_tokens: Optional[int] = None  # the perplexity tokens measured (the text may hold fewer than --ppl-tokens)

    @property
    def model_sha256(self) -> str:
        """SHA-256 of the unedited model's parameter digests: the weights' identity (the name is in the settings)."""
        return sha256_of_json(self.fingerprint.digests)


def _setup(config: ScaleConfig, hps: List[EditHyperParams], model=None, tok=None, stored: str = "") -> _Setup:
    """Load the model (unless given), check the perplexity text, fingerprint the model and refuse a stored file of
    ``out`` matching the glob ``stored`` made on other weights under the same name, then the ``C0`` statistics."""
    main = hps[0]
    for hp, path in zip(hps[1:], config.hparams[1:]):
        for key in ("model_name", "mom2_dataset", "mom2_n_samples", "mom2_dtype", "mom2_max_length"):
            if getattr(hp, key) != getattr(main, key):
                raise BenchConfigError(
                    f"bench-scale: {path}: {key} differs from {config.hparams[0]}'s; run it separately"
                )
    if model is None:
        from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

        with Stage(f"loading model {main.model_name}"):
            model, tok = load_model_and_tokenizer(str(main.model_name), config.device)
    ppl_text = _ppl_text(config)
    settings = ScoringSettings(config.eval_batch_size, ppl_text, config.ppl_tokens)
    measured = ppl_token_count(tok, settings)
    if measured is not None and measured < 2:
        raise BenchConfigError(f"bench-scale: the perplexity text {ppl_text} gives {measured} token(s); perplexity "
                               "needs at least 2 (--ppl-tokens >= 2 and a longer --ppl-text, or --ppl-tokens 0)")
    loaded = _Setup(model, tok, hps, {}, ModelFingerprint.of(model), settings, ppl_tokens=measured)
    for path in sorted(Path(config.out).glob(stored)) if stored else []:
        refuse_other_settings(path, settings_differences(read_json(path), {"model_sha256": loaded.model_sha256}))
    wanted: Dict[str, set] = {}
    for hp in hps:
        wanted.setdefault(hp.rewrite_module_tmp, set()).update(hp.layers)
    moments = {}
    for template, layers in wanted.items():
        with Stage(f"C0 statistics for layers {sorted(layers)}"):
            request = StatsRequest.of_hparams(main, layers=sorted(layers), module_tmp=template, progress=False)
            moments[template] = cached_second_moments(model, tok, request)
    return dataclasses.replace(loaded, moments=moments)


def _ppl_text(config: ScaleConfig) -> Optional[str]:
    """The perplexity text (``None`` with ``ppl_tokens == 0``): ``ppl_text``, else the embedded WikiText-2 test split
    (as the bench, :func:`~zerounlearn_editor.data.builtin.default_ppl_text`)."""
    return (config.ppl_text or str(default_ppl_text())) if config.ppl_tokens > 0 else None


def _ppl(setup: _Setup) -> Optional[float]:
    return model_metrics(setup.model, setup.tok, [], setup.settings)["ppl"]


def _edit(setup: _Setup, hp: EditHyperParams, requests: List[Dict[str, Any]], targets: Optional[NeutralTargets]):
    """One edit (targets optimised inside when ``targets`` is None); returns ``(weights_copy, details, cost)``."""
    report = EditReport()
    moments = {layer: setup.moments[hp.rewrite_module_tmp][layer] for layer in hp.layers}
    meter = measure()
    with meter as cost:
        _, weights_copy = _load_method_apply(hp)(
            setup.model, setup.tok, requests, hp, return_orig_weights=True, second_moments=moments, progress=False,
            report=report, targets=targets, fluency_guard="warn")
    meter.stage_peaks(report)
    details = {
        "timings": dict(report.timings),
        "target_steps_mean": fmean(report.target_steps) if report.target_steps else None,
        "target_nll_mean": fmean(report.target_nll) if report.target_nll else None,
        "layer_change_norm": {str(k): v for k, v in report.layer_change_norm.items()},
        **({"fluency_guard": report.fluency} if report.fluency else {}),
    }
    return weights_copy, details, cost


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


def _cases(
    config: ScaleConfig, run: "_Run", total: int, seed: int, need_model: Callable[[], "_Setup"]
) -> Tuple[List[UnlearnCase], int]:
    """The seed's ``total`` cases: ``sample_cases(pool, total, seed)``, or with ``known_only`` the first ``total``
    known cases of the pool shuffled with ``seed`` (the selection cached in ``<out>/known_seed_<seed>.json``, keyed
    by the run's settings; ``need_model`` loads the model only when the selection has to be computed). Either way
    one case per prompt (:func:`one_request_per_prompt`)."""
    pool = run.pool
    if len(pool) < total:
        raise BenchConfigError(f"bench-scale: {total} cases needed, {config.data} has {len(pool)}")
    shuffled = random.Random(seed).sample(pool, len(pool))
    if not config.known_only:
        drawn, _ = one_request_per_prompt(sample_cases(pool, total, seed), shuffled)
        return drop_batch_forget_neighbours(drawn)
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


# ------------------------------------------------------------------------------ stored settings

BATCH_ROWS = "seed_*/*_n*.json"
"""The stored batch rows of an output folder (a glob)."""
STREAMS = "seed_*/*/stream.json"
"""The stored streams of an output folder (a glob)."""


@dataclass
class _Run:
    """What a run knows before the model loads: the YAMLs (hyperparameters, tags), the case pool, the settings
    every stored row or stream of ``out`` must share (:func:`run_settings`) and per tag its YAML's content hash."""

    hps: List[EditHyperParams]
    tags: List[str]
    pool: List[UnlearnCase]
    settings: Dict[str, Any]
    hparams_sha256: Dict[str, str]

    def row_settings(self, tag: str) -> Dict[str, Any]:
        """The settings a row or stream of ``tag`` is keyed by: the run's and its YAML's content hash."""
        return dict(self.settings, hparams_sha256=self.hparams_sha256[tag])


def run_settings(config: ScaleConfig, pool: Sequence[UnlearnCase], model_name: str) -> Dict[str, Any]:
    """Everything besides the YAML that changes a row's numbers: the model (by name), the cases (SHA-256 of the
    loaded records, so an edited data file counts), the perplexity text (its SHA-256) and tokens, and the known
    subset's threshold and draw. Batch size, target chunk, device, rounds and ``eval_every`` change no number."""
    ppl_text = _ppl_text(config)
    return as_stored({
        "model": model_name,
        "data_sha256": cases_sha256(pool),
        "ppl_tokens": config.ppl_tokens,
        "ppl_text_sha256": hashlib.sha256(read_text(ppl_text).encode("utf-8")).hexdigest() if ppl_text else None,
        "known_min_accuracy": config.known_min_accuracy,
        "known_only": config.known_only,
    })


def cases_sha256(cases: Sequence[UnlearnCase]) -> str:
    """SHA-256 of the cases' canonical JSON (every field of every case and probe; 0.4 s for CounterFact's 9,484
    train records on one core)."""
    text = json.dumps(list(cases), default=vars, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _prepare(config: ScaleConfig, stored: str) -> _Run:
    """Validate ``config``, load the YAMLs and the cases, and refuse (before the model loads) when a stored file of
    ``out`` matching the glob ``stored`` (batch rows or stream folders) was made with other settings."""
    config.validate()
    hps = [_load_method(p)[0] for p in config.hparams]
    tags = [_tag(p) for p in config.hparams]
    for index, tag in enumerate(tags):
        if tag in tags[:index]:
            raise BenchConfigError(f"bench-scale: {config.hparams[tags.index(tag)]} and {config.hparams[index]} "
                                   f"share the file-name tag {tag!r} (folder and stem); rename one")
    with Stage(f"loading {config.data} cases"):
        pool = load_cases(config.data, path=config.data_path)
    run = _Run(hps, tags, pool, run_settings(config, pool, str(hps[0].model_name)),
               {tag: sha256_of_file(path) for tag, path in zip(tags, config.hparams)})
    for path in sorted(Path(config.out).glob(stored)):
        record = read_json(path)
        if "settings" not in record:
            refuse_other_settings(path, ["settings: not recorded there (written before bench-scale recorded them)"])
        tag = path.parent.name if path.name == "stream.json" else _record_tag(record)
        wanted = run.row_settings(tag) if tag in run.hparams_sha256 else run.settings
        refuse_other_settings(path, settings_differences(record["settings"], wanted))
    return run


def _record_tag(record: Mapping[str, Any]) -> str:
    """A batch row's YAML tag (rows before tags were stored: derived from its ``hparams`` path)."""
    return record.get("tag") or _tag(record["hparams"])


# -------------------------------------------------------------------------------- target cache

class TargetCache:
    """Neutral targets of the unedited model, per chunk of requests, as safetensors files.

    A chunk's file is named by the SHA-256 of its requests, the target settings
    (:func:`~zerounlearn_editor.engine.pipeline.target_settings`) and the model's fingerprint;
    it holds ``z``, ``h0`` ``[k, d_model]``, ``nll`` ``[k]``, ``steps`` ``[k]`` and the seconds its
    optimisation took (metadata ``seconds``).
    """

    def __init__(self, folder: Path, fingerprint: ModelFingerprint):
        self.folder = Path(folder)
        self.model_key = sha256_of_json(fingerprint.digests)
        self.last_cpu_seconds = 0.0

    def path(self, model: nn.Module, hp: EditHyperParams, requests: Sequence[Mapping[str, Any]]) -> Path:
        key = sha256_of_json(
            {"requests": list(requests), "settings": target_settings(model, hp), "model": self.model_key}
        )
        return self.folder / f"targets_{key[:24]}.safetensors"

    def get(self, model: nn.Module, tok: Any, hp: EditHyperParams, requests: List[Dict[str, Any]],
            chunk: int) -> Tuple[NeutralTargets, float, List[Dict[str, float]]]:
        """Targets of ``requests`` (loaded or optimised chunk by chunk), their total optimisation seconds and
        the cost of each chunk optimised in this call."""
        from safetensors.torch import load_file, save

        parts, seconds, costs = [], 0.0, []
        self.last_cpu_seconds = 0.0  # the process CPU seconds of these targets (nan for files written without it)
        for start in range(0, len(requests), chunk):
            part = requests[start:start + chunk]
            path = self.path(model, hp, part)
            if path.exists():
                from safetensors import safe_open

                with safe_open(str(path), "pt") as handle:
                    meta = handle.metadata() or {}
                tensors = load_file(str(path))
                took = float(meta.get("seconds", "nan"))
                cpu = float(meta.get("cpu_seconds", "nan"))
            else:
                with measure(trace_python=False) as cost:  # tracemalloc would slow the optimisation loop
                    t = neutral_targets(model, tok, part, hp)
                took, cpu = cost.seconds, cost.cpu_seconds
                costs.append(dict(cost.as_dict(), facts=len(part)))
                tensors = {
                    "z": t.z.detach().cpu().contiguous(),
                    "h0": t.h0.detach().cpu().contiguous(),
                    "nll": t.nll.detach().cpu().contiguous(),
                    "steps": torch.tensor(list(t.steps_run), dtype=torch.long),
                }
                write_bytes_atomic(path, save(tensors, metadata={"seconds": repr(took), "cpu_seconds": repr(cpu)}))
                LOG.info("targets %d-%d of %d: %.1fs", start + 1, start + len(part), len(requests), took)
            parts.append(tensors)
            seconds += took
            self.last_cpu_seconds += cpu
        targets = NeutralTargets(
            z=torch.cat([p["z"] for p in parts]), h0=torch.cat([p["h0"] for p in parts]),
            nll=torch.cat([p["nll"] for p in parts]), steps_run=[int(s) for p in parts for s in p["steps"].tolist()])
        return targets, seconds, costs


# ---------------------------------------------------------------------------------- batch runs

def batch_row_path(out: Path, seed: int, tag: str, n: int) -> Path:
    """``<out>/seed_<seed>/<tag>_n<n>.json``."""
    return Path(out) / f"seed_{seed}" / f"{tag}_n{n}.json"


def run_scale_batch(config: ScaleConfig, model: Optional[nn.Module] = None, tok: Any = None) -> Dict[str, Any]:
    """Run (or resume) one-batch rows for every seed, YAML and ``n``; returns and writes the summary.

    A stored row is resumed only when made with this run's settings (:func:`run_settings`, the YAML's content hash);
    any other stored row of ``out`` (they all go into one table) must share the run's settings too."""
    if config.rounds != 1:
        raise BenchConfigError(f"bench-scale batch: rounds is a stream setting (got {config.rounds}); a batch has none")
    run = _prepare(config, BATCH_ROWS)
    out, hps, tags = Path(config.out), run.hps, run.tags
    ns = sorted(set(config.ns))
    setup: Optional[_Setup] = None

    def need() -> _Setup:
        nonlocal setup
        setup = setup or _setup(config, hps, model, tok, BATCH_ROWS)
        return setup
    for seed in config.seeds:
        cases, dropped = _cases(config, run, ns[-1], seed, need)
        todo = []
        for hp, tag in zip(hps, tags):
            for n in ns:
                path = batch_row_path(out, seed, tag, n)
                if not path.exists():
                    todo.append((hp, tag, n))
                elif read_json(path).get("case_ids") != [c.case_id for c in cases[:n]]:
                    raise BenchConfigError(f"bench-scale: {path} holds another sample of cases (other data or seed); "
                                           "use another --out or remove it")
        if not todo:
            LOG.info("seed %d: every row done", seed)
            continue
        setup = need()
        if setup.base_ppl is None:
            setup.base_ppl = _ppl(setup)
        cache = TargetCache(out / "targets", setup.fingerprint)
        requests = [dict(c.request) for c in cases]
        pre: List[CaseScores] = []
        for hp, tag, n in sorted(todo, key=lambda item: item[2]):  # smaller rows first: partial results early
            if len(pre) < n:
                with Stage(f"seed {seed}: scoring the unedited model on cases {len(pre) + 1}-{n}"):
                    pre += score_cases(setup.model, setup.tok, cases[len(pre):n], config.eval_batch_size)
            known = known_mask(pre[:n], config.known_min_accuracy)
            with Stage(f"seed {seed}: targets of {n} facts ({tag})"):
                targets, target_seconds, _ = cache.get(setup.model, setup.tok, hp, requests[:n], config.target_chunk)
            setup.fingerprint.verify(setup.model, f"seed {seed}: before {tag} n={n}")
            with Stage(f"seed {seed}: {tag} edit of {n} facts") as stage:
                weights_copy, details, cost = _edit(setup, hp, requests[:n], targets)
            try:
                with Stage(f"seed {seed}: {tag} n={n} evaluation") as evaluation:
                    post = score_cases(setup.model, setup.tok, cases[:n], config.eval_batch_size)
                    ppl = _ppl(setup)
            finally:
                restore_weights(setup.model, weights_copy)
            setup.fingerprint.verify(setup.model, f"seed {seed}: after restoring {tag} n={n}")
            metrics = scale_metrics(post, pre[:n], known)
            base = scale_metrics(pre[:n], pre[:n], known)
            timings = dict(details.pop("timings"), targets=target_seconds)
            target_cpu = cache.last_cpu_seconds
            record = {
                **_record_head(config, run, setup, tag),
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
            write_json_atomic(batch_row_path(out, seed, tag, n), record)
            LOG.info("seed %d %s n=%d: Eff %.1f (first %.1f) Spe %.1f PPL %s", seed, tag, n, metrics["eff"],
                     metrics["eff_first"], metrics["spe"], ppl)
    return write_batch_summary(out)


def _record_head(config: ScaleConfig, run: _Run, setup: _Setup, tag: str) -> Dict[str, Any]:
    """What a batch row or a stream's ``stream.json`` records of its run: the YAML (path, tag), the data, the
    perplexity tokens measured, the known threshold and the settings it is keyed by (:meth:`_Run.row_settings`)."""
    return {
        "hparams": config.hparams[run.tags.index(tag)],
        "tag": tag,
        "data": config.data,
        "data_path": config.data_path,
        "ppl_tokens": setup.ppl_tokens,
        "known_min_accuracy": config.known_min_accuracy,
        "settings": run.row_settings(tag),
        "model_sha256": setup.model_sha256,
    }


def _mean_std(values: Sequence[Optional[float]]) -> Optional[Dict[str, float]]:
    vals = [float(v) for v in values if v is not None and v == v]  # None and NaN: not measured
    if not vals:
        return None
    mean = fmean(vals)
    std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
    return {"mean": mean, "std": std, "n": len(vals)}


def _batch_rows(out: Path) -> Dict[Tuple[str, int], List[Dict[str, Any]]]:
    rows: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}
    for path in sorted(Path(out).glob(BATCH_ROWS)):
        record = read_json(path)
        rows.setdefault((_record_tag(record), int(record["n"])), []).append(record)
    return rows


BATCH_COLUMNS = (
    ("eff", "Eff", "{:.1f}"),
    ("eff_first", "Eff 1st", "{:.1f}"),
    ("gen", "Gen", "{:.1f}"),
    ("spe", "Spe", "{:.1f}"),
    ("spe_pct", "Spe % base", "{:.0f}"),
    ("ppl", "PPL", "{:.2f}"),
    ("ppl_pct", "PPL Δ%", "{:+.1f}"),
    ("known_count", "known", "{:.0f}"),
    ("eff_known", "Eff known", "{:.1f}"),
    ("eff_first_known", "Eff 1st known", "{:.1f}"),
    ("gen_known", "Gen known", "{:.1f}"),
    ("spe_known", "Spe known", "{:.1f}"),
)


def _derived(metrics: Mapping[str, Any], base: Mapping[str, Any]) -> Dict[str, Any]:
    out = dict(metrics)
    if base.get("spe"):
        out["spe_pct"] = 100.0 * metrics["spe"] / base["spe"]
    if metrics.get("ppl") is not None and base.get("ppl"):
        out["ppl_pct"] = 100.0 * (metrics["ppl"] / base["ppl"] - 1.0)
    return out


def write_batch_summary(out: Path) -> Dict[str, Any]:
    """``scale_batch_summary.json`` and ``scale_batch.md`` from the row files (mean ± std over seeds)."""
    summary: Dict[str, Any] = {"rows": []}
    for (tag, n), records in sorted(_batch_rows(out).items(), key=lambda kv: (kv[0][1], kv[0][0])):
        seeds = [r["seed"] for r in records]
        base = {
            k: _mean_std([r["base"].get(k) for r in records])
            for k in ("eff", "eff_first", "gen", "spe", "ppl", "eff_known", "eff_first_known", "gen_known", "spe_known")
        }
        derived = [_derived(r["metrics"], r["base"]) for r in records]
        keys = sorted({k for d in derived for k in d if isinstance(d[k], (int, float))})
        metrics = {k: _mean_std([d.get(k) for d in derived]) for k in keys}
        stages = sorted({k for r in records for k in r["stages_seconds"]})
        summary["rows"].append({
            "tag": tag, "n": n, "seeds": seeds, "hparams": records[0]["hparams"], "base": base, "metrics": metrics,
            "ppl_tokens": records[0].get("ppl_tokens"),
            "stages_seconds": {k: _mean_std([r["stages_seconds"].get(k) for r in records]) for k in stages},
            "end_to_end_seconds": _mean_std([r["end_to_end_seconds"] for r in records]),
            "end_to_end_cpu_seconds": _mean_std([r.get("end_to_end_cpu_seconds") for r in records]),
            "edit_cpu_seconds": _mean_std([r["edit_cost"]["cpu_seconds"] for r in records]),
            "edit_rss_peak_above_start_mb": _mean_std([r["edit_cost"]["rss_peak_above_start_mb"] for r in records]),
            "edit_tracemalloc_peak_mb": _mean_std([r["edit_cost"]["tracemalloc_peak_mb"] for r in records]),
        })
    summary["table_markdown"] = format_batch_table(summary)
    write_json_atomic(Path(out) / "scale_batch_summary.json", summary)
    write_text_atomic(Path(out) / "scale_batch.md", summary["table_markdown"] + "\n")
    return summary


def _cell(stats: Optional[Mapping[str, Any]], fmt: str) -> str:
    if not stats:
        return "-"
    return fmt.format(stats["mean"]) + (f" ± {fmt.format(stats['std']).lstrip('+')}" if stats["n"] > 1 else "")


def format_batch_table(summary: Mapping[str, Any]) -> str:
    """Quality table (unedited row per n, then the edits) and the cost table."""
    head = "| YAML | n | seeds | " + " | ".join(h for _, h, _ in BATCH_COLUMNS) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(BATCH_COLUMNS)]
    shown_base = set()
    for row in summary["rows"]:
        if row["n"] not in shown_base:
            shown_base.add(row["n"])
            base = dict(row["base"], known_count=row["metrics"].get("known_count"))
            lines.append(f"| unedited | {row['n']} | {len(row['seeds'])} | "
                         + " | ".join(_cell(base.get(k), f) for k, _, f in BATCH_COLUMNS) + " |")
        lines.append(f"| {row['tag']} | {row['n']} | {len(row['seeds'])} | "
                     + " | ".join(_cell(row["metrics"].get(k), f) for k, _, f in BATCH_COLUMNS) + " |")
    stages = ("targets", "contexts", "keys", "solve", "write_back", "fluency")
    lines += [
        "",
        "| YAML | n | "
        + " | ".join(f"{s} s" for s in stages)
        + " | end to end s | edit CPU s (no targets) | end to end CPU s | edit RSS peak MB | edit tracemalloc MB |",
        "|---|---|" + "---|" * (len(stages) + 5),
    ]
    for row in summary["rows"]:
        lines.append(
            f"| {row['tag']} | {row['n']} | "
            + " | ".join(_cell(row["stages_seconds"].get(s), "{:.1f}") for s in stages)
            + f" | {_cell(row['end_to_end_seconds'], '{:.0f}')} | {_cell(row['edit_cpu_seconds'], '{:.0f}')}"
            + f" | {_cell(row['end_to_end_cpu_seconds'], '{:.0f}')} | "
              f"{_cell(row['edit_rss_peak_above_start_mb'], '{:.0f}')}"
            + f" | {_cell(row['edit_tracemalloc_peak_mb'], '{:.1f}')} |"
        )
    return "\n".join(lines + _ppl_note(row.get("ppl_tokens") for row in summary["rows"]))


def _ppl_note(tokens: Iterable[Optional[int]]) -> List[str]:
    """The line under a table that says on how many tokens PPL was measured (the tokens scored, which a short
    text makes fewer than ``--ppl-tokens``); none without a perplexity."""
    counts = sorted({t for t in tokens if t})
    return ["", f"PPL: perplexity on the first {' / '.join(map(str, counts))} tokens of the text."] if counts else []


# --------------------------------------------------------------------------------- stream runs

def stream_dir(out: Path, seed: int, tag: str) -> Path:
    """``<out>/seed_<seed>/<tag>``: the round files and the newest round's edited weights."""
    return Path(out) / f"seed_{seed}" / tag


def _weights_path(folder: Path, k: int) -> Path:
    return folder / f"weights_round_{k}.safetensors"


def _resume_point(folder: Path) -> int:
    """The newest round with its JSON and its weights file (0 = start from the unedited model)."""
    done = [int(p.stem.split("_")[1]) for p in folder.glob("round_*.json")]
    return max([k for k in done if _weights_path(folder, k).exists()], default=0)


def run_scale_stream(config: ScaleConfig, model: Optional[nn.Module] = None, tok: Any = None) -> Dict[str, Any]:
    """Run (or resume) ``config.rounds`` rounds of ``config.ns[0]`` facts for every seed and YAML.

    A stream resumes only when made with this run's settings (:func:`run_settings`, the YAML's content hash); the
    other streams of ``out`` (one summary) must share the run's settings too."""
    from safetensors.torch import load_file, save

    if len(config.ns) != 1:
        raise BenchConfigError(f"bench-scale stream: one --n (facts per round), got {config.ns}")
    run = _prepare(config, STREAMS)
    out, n, rounds, hps, tags = Path(config.out), config.ns[0], config.rounds, run.hps, run.tags
    setup: Optional[_Setup] = None

    def need() -> _Setup:
        nonlocal setup
        setup = setup or _setup(config, hps, model, tok, STREAMS)
        return setup
    for seed in config.seeds:
        for hp, tag in zip(hps, tags):
            folder = stream_dir(out, seed, tag)
            start = _resume_point(folder)
            cases, dropped = _cases(config, run, rounds * n, seed, need)
            if start and (folder / "stream.json").exists():
                meta = read_json(folder / "stream.json")
                upto = min(start, rounds) * n
                if meta.get("n") != n or meta.get("case_ids", [])[:upto] != [c.case_id for c in cases[:upto]]:
                    raise BenchConfigError(
                        f"bench-scale: {folder} holds a stream of other facts (other data, seed or n); "
                        "use another --out or remove it"
                    )
            if start >= rounds:
                continue
            setup = need()
            if setup.base_ppl is None:
                setup.base_ppl = _ppl(setup)
            setup.fingerprint.verify(setup.model, f"seed {seed}: before the {tag} stream")
            originals: Dict[str, torch.Tensor] = {}
            params = dict(setup.model.named_parameters())
            pre: List[CaseScores] = []
            known: List[bool] = []

            def ensure_pre(upto: int) -> None:
                """Unedited scores of ``cases[:upto]``, scored on the original weights swapped in for the while."""
                if len(pre) >= upto:
                    return
                edited = {name: params[name].detach().clone() for name in originals}
                restore_weights(setup.model, originals)
                try:
                    with Stage(f"seed {seed}: scoring the unedited model on cases {len(pre) + 1}-{upto}"):
                        new = score_cases(setup.model, setup.tok, cases[len(pre):upto], config.eval_batch_size)
                finally:
                    restore_weights(setup.model, edited)
                pre.extend(new)
                known.extend(known_mask(new, config.known_min_accuracy))

            ensure_pre(max(start, 1) * n)
            saved = load_file(str(_weights_path(folder, start))) if start else {}
            if not start or read_json(folder / "stream.json").get("rounds") != rounds:
                write_json_atomic(folder / "stream.json", dict(
                    _record_head(config, run, setup, tag), seed=seed, n=n, rounds=rounds,
                    case_ids=[c.case_id for c in cases], neighbours_dropped=dropped, base_ppl=setup.base_ppl,
                    base_round1=scale_metrics(pre[:n], pre[:n], known[:n])))
            try:
                with torch.no_grad():
                    for name, value in saved.items():
                        originals[name] = params[name].detach().clone()
                        params[name].copy_(value)
                if start:
                    LOG.info("seed %d %s: resuming after round %d", seed, tag, start)
                for k in range(start + 1, rounds + 1):
                    chunk = cases[(k - 1) * n: k * n]
                    requests = [dict(c.request) for c in chunk]
                    with Stage(f"seed {seed}: {tag} round {k}/{rounds}") as stage:
                        weights_copy, details, cost = _edit(setup, hp, requests, None)
                    for name, value in weights_copy.items():
                        originals.setdefault(name, value)
                    with Stage(f"seed {seed}: {tag} round {k} evaluation") as evaluation:
                        done = k * n
                        ensure_pre(done)
                        full = k % config.eval_every == 0 or k == rounds
                        scored = cases[:done] if full else cases[:n] + (chunk if k > 1 else [])
                        post = score_cases(setup.model, setup.tok, scored, config.eval_batch_size)
                        record: Dict[str, Any] = {
                            "round": k,
                            "forgotten": done,
                            "edit_seconds": stage.seconds,
                            "stages_seconds": details.pop("timings"),
                            "edit_cost": cost.as_dict(),
                            "details": details,
                            "round1": scale_metrics(post[:n], pre[:n], known[:n]),
                            "this_round": scale_metrics(post[-n:], pre[(k - 1) * n : done], known[(k - 1) * n : done]),
                        }
                        if full:
                            record["all"] = dict(scale_metrics(post, pre[:done], known[:done]), ppl=_ppl(setup))
                            record["all_base"] = dict(
                                scale_metrics(pre[:done], pre[:done], known[:done]), ppl=setup.base_ppl
                            )
                    record["eval_seconds"] = evaluation.seconds
                    current = {name: params[name].detach().cpu().contiguous() for name in originals}
                    write_bytes_atomic(_weights_path(folder, k), save(current, metadata={"round": str(k)}))
                    write_json_atomic(folder / f"round_{k}.json", record)
                    old = _weights_path(folder, k - 1)
                    if k > 1 and old.exists():
                        old.unlink()
                    LOG.info(
                        "seed %d %s round %d: round-1 Eff %.1f (first %.1f)%s",
                        seed,
                        tag,
                        k,
                        record["round1"]["eff"],
                        record["round1"]["eff_first"],
                        f"; all: Eff {record['all']['eff']:.1f} Spe {record['all']['spe']:.1f} PPL "
                        f"{record['all']['ppl']}"
                        if full
                        else "",
                    )
            finally:
                restore_weights(setup.model, originals)
            setup.fingerprint.verify(setup.model, f"seed {seed}: after restoring the {tag} stream")
    return write_stream_summary(out)


STREAM_COLUMNS = (
    ("round1", "eff", "R1 Eff", "{:.1f}"), ("round1", "eff_first", "R1 Eff 1st", "{:.1f}"),
    ("round1", "eff_first_known", "R1 Eff 1st known", "{:.1f}"), ("this_round", "eff", "Eff this round", "{:.1f}"),
    ("all", "eff", "Eff all", "{:.1f}"), ("all", "eff_first", "Eff 1st all", "{:.1f}"),
    ("all", "eff_first_known", "Eff 1st known all", "{:.1f}"), ("all", "gen", "Gen all", "{:.1f}"),
    ("all", "spe", "Spe all", "{:.1f}"), ("all", "spe_pct", "Spe % base", "{:.0f}"), ("all", "ppl", "PPL", "{:.2f}"),
    ("all", "ppl_pct", "PPL Δ%", "{:+.1f}"), ("", "edit_seconds", "round s", "{:.1f}"),
    ("", "cpu_seconds", "round CPU s", "{:.1f}"), ("", "rss_peak_above_start_mb", "RSS peak MB", "{:.0f}"),
)


def _stream_runs(out: Path) -> Dict[str, List[Dict[str, Any]]]:
    runs: Dict[str, List[Dict[str, Any]]] = {}
    for meta_path in sorted(Path(out).glob(STREAMS)):
        meta = read_json(meta_path)
        rounds = sorted((read_json(p) for p in meta_path.parent.glob("round_*.json")), key=lambda r: r["round"])
        runs.setdefault(meta_path.parent.name, []).append(dict(meta, rounds_done=rounds))
    return runs


def _stream_row(record: Mapping[str, Any], meta: Mapping[str, Any]) -> Dict[str, Any]:
    row: Dict[str, Any] = {
        "round1": record["round1"],
        "this_round": record["this_round"],
        "": {
            "edit_seconds": record["edit_seconds"],
            "cpu_seconds": record["edit_cost"]["cpu_seconds"],
            "rss_peak_above_start_mb": record["edit_cost"]["rss_peak_above_start_mb"],
        },
    }
    if "all" in record:
        row["all"] = _derived(record["all"], record["all_base"])
    return row


def write_stream_summary(out: Path) -> Dict[str, Any]:
    """``scale_stream_summary.json``, ``scale_stream.md`` and ``scale_stream.png`` from the round files."""
    summary: Dict[str, Any] = {"streams": {}}
    for tag, metas in _stream_runs(out).items():
        rounds_done = min(len(m["rounds_done"]) for m in metas)
        rows = []
        for i in range(rounds_done):
            per_seed = [_stream_row(m["rounds_done"][i], m) for m in metas]
            cells = {}
            for group, key, _, _ in STREAM_COLUMNS:
                cells[f"{group}.{key}"] = _mean_std([r.get(group, {}).get(key) for r in per_seed])
            rows.append({"round": i + 1, "forgotten": metas[0]["rounds_done"][i]["forgotten"], "cells": cells})
        # the unedited model on every fact of the newest fully scored round (all seeds at that round)
        full = [i for i in range(rounds_done) if all("all_base" in m["rounds_done"][i] for m in metas)]
        last = [m["rounds_done"][full[-1]]["all_base"] for m in metas] if full else []
        base = {
            f"all.{k}": _mean_std([b.get(k) for b in last])
            for k in ("eff", "eff_first", "eff_first_known", "gen", "spe", "ppl")
        }
        base.update(
            {
                f"round1.{k}": _mean_std([m["base_round1"].get(k) for m in metas])
                for k in ("eff", "eff_first", "eff_first_known")
            }
        )
        summary["streams"][tag] = {
            "seeds": [m["seed"] for m in metas],
            "n": metas[0]["n"],
            "rounds": metas[0]["rounds"],
            "hparams": metas[0]["hparams"],
            "ppl_tokens": metas[0].get("ppl_tokens"),
            "rounds_done": rounds_done,
            "base": base,
            "rows": rows,
        }
    summary["table_markdown"] = format_stream_table(summary)
    write_json_atomic(Path(out) / "scale_stream_summary.json", summary)
    write_text_atomic(Path(out) / "scale_stream.md", summary["table_markdown"] + "\n")
    plot = plot_stream(summary, Path(out) / "scale_stream.png")
    if plot:
        summary["plot"] = str(plot)
    return summary


def format_stream_table(summary: Mapping[str, Any], every: int = 0) -> str:
    """One table per stream: unedited row, then every round with a full evaluation (and round 1).

    ``every`` > 0 also keeps rounds that are multiples of it.
    """
    lines: List[str] = []
    for tag, item in summary["streams"].items():
        lines += [f"### {tag}: {item['rounds']} rounds x {item['n']} facts, seeds {item['seeds']} "
                  f"({item['rounds_done']} rounds done)", "",
                  "| round | facts forgotten | " + " | ".join(h for *_, h, _ in STREAM_COLUMNS) + " |",
                  "|---|---|" + "---|" * len(STREAM_COLUMNS)]
        lines.append(
            "| 0 (unedited) | 0 | "
            + " | ".join(_cell(item["base"].get(f"{g}.{k}"), f) for g, k, _, f in STREAM_COLUMNS)
            + " |"
        )
        for row in item["rows"]:
            keep = row["round"] == 1 or row["cells"].get("all.eff") or (every and row["round"] % every == 0)
            if keep:
                lines.append(
                    f"| {row['round']} | {row['forgotten']} | "
                    + " | ".join(_cell(row["cells"].get(f"{g}.{k}"), f) for g, k, _, f in STREAM_COLUMNS)
                    + " |"
                )
        lines += _ppl_note([item.get("ppl_tokens")]) + [""]
    return "\n".join(lines)


def plot_stream(summary: Mapping[str, Any], path: Path) -> Optional[Path]:
    """Round-1 facts' Eff (all tokens and first token) and the round's seconds against facts forgotten."""
    if not summary["streams"]:
        return None
    plt = pyplot("the stream plot")
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for tag, item in summary["streams"].items():
        xs = [r["forgotten"] for r in item["rows"]]
        for key, style in (("round1.eff", "-"), ("round1.eff_first", "--")):
            base = item["base"].get(key)
            ys = [(r["cells"].get(key) or {}).get("mean", float("nan")) for r in item["rows"]]
            axes[0].plot(
                [0] + xs,
                [base["mean"] if base else float("nan")] + ys,
                style,
                label=f"{tag} {item['rounds']}x{item['n']} ({'first token' if 'first' in key else 'all tokens'})",
            )
        full = [r for r in item["rows"] if r["cells"].get("all.eff")]
        axes[1].plot([r["forgotten"] for r in full], [r["cells"]["all.eff_first"]["mean"] for r in full], marker="o",
                     label=f"{tag} {item['rounds']}x{item['n']}")
        for key, style, what in ((".edit_seconds", "-", "wall"), (".cpu_seconds", "--", "CPU")):
            axes[2].plot(xs, [(r["cells"].get(key) or {}).get("mean", float("nan")) for r in item["rows"]], style,
                         label=f"{tag} {item['rounds']}x{item['n']} ({what})")
    titles = ("round-1 facts: Eff (token acc. %)", "all facts so far: Eff first token", "seconds per round (edit)")
    for ax, title in zip(axes, titles):
        ax.set_xlabel("facts forgotten")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def iter_seeds(spec: str) -> Iterator[int]:
    """Seeds from ``"1-3"`` / ``"1,2"`` (:func:`~zerounlearn_editor.bench.config.parse_seeds`)."""
    from zerounlearn_editor.bench.config import parse_seeds

    yield from parse_seeds(spec)
