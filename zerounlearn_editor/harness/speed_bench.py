"""Speed benchmark: every stage of an edit, our batched pipeline against the reference structure.

For each ``n`` (CounterFact cases), method (every registered editing method by default) and pipeline
(``ours``, ``per-request``; see :mod:`zerounlearn_editor.harness.reference_pipeline`) one edit is timed
with the statistics precomputed (as a cache would provide them), stage by stage from
:class:`~zerounlearn_editor.engine.pipeline.EditReport` (context templates, target optimisation, key
extraction, solve, write-back), plus one :func:`evaluate_probes` pass over the forget prompts.
The statistics stage is timed once per pipeline on an empty cache, and a micro-benchmark
compares one pass for all edited layers, one pass for a single layer and one pass per layer.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` (reset per stage); on the CPU the
peak resident set size sampled every 5 ms by a thread (psutil), falling back to the process's
lifetime ``ru_maxrss`` when psutil is missing. Besides wall time every measured block records
the process's CPU time (``time.process_time``): on a shared CPU it is far less sensitive to
other jobs than wall time, so the CPU ratios are the ones to trust there. The two pipelines'
edited weights are compared (max abs difference) in the same run.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.data.corpus import load_corpus
from zerounlearn_editor.engine.contexts import clear_context_prefixes
from zerounlearn_editor.engine.hparams import EditHyperParams, HParamsError, load_config_file
from zerounlearn_editor.engine.pipeline import EditReport, batched_statistics, restore_weights
from zerounlearn_editor.engine.stats import STATS_BATCH_SIZE, SecondMoment, collect_second_moments
from zerounlearn_editor.harness.reference_pipeline import (
    PIPELINES,
    apply_zerounlearn_gd_per_request,
    apply_zerounlearn_per_request,
    per_layer_statistics,
)
from zerounlearn_editor.harness.speed_measure import RANDOM_CONFIGS, MemoryMeter, build_random_model, sync_device
from zerounlearn_editor.harness.speed_report import format_speed_markdown
from zerounlearn_editor.methods.registry import get_method, method_names
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

__all__ = [
    "SpeedConfig",
    "MemoryMeter",
    "RANDOM_CONFIGS",
    "build_random_model",
    "parse_int_list",
    "run_speed",
    "format_speed_markdown",
]

LOG = logging.getLogger(__name__)

_REFERENCE_APPLY: Dict[type, Callable[..., Any]] = {
    ZeroUnlearnHyperParams: apply_zerounlearn_per_request,
    ZeroUnlearnGDHyperParams: apply_zerounlearn_gd_per_request,
}
"""The ``per-request`` reference pipeline, by the hparams class of the maths it reproduces. The methods timed are
the registered editing methods (:mod:`zerounlearn_editor.methods.registry`; all of them by default)."""


def _reference(method: str) -> Optional[Callable[..., Any]]:
    """The ``per-request`` reference of the registered ``method``, if its hparams class has one."""
    return _REFERENCE_APPLY.get(get_method(method).hparams_class)


def _apply(method: str, pipeline: str) -> Callable[..., Any]:
    """The edit of ``method`` under ``pipeline``: the registered apply (``ours``) or the reference."""
    reference = _reference(method)
    return reference if pipeline != "ours" and reference is not None else get_method(method).apply


def _check_methods(methods: Sequence[str], pipelines: Sequence[str]) -> None:
    """Unknown methods or pipelines, or a ``per-request`` run of a method without a reference, name the choices."""
    unknown = [m for m in methods if m not in method_names()] + [p for p in pipelines if p not in PIPELINES]
    if unknown:
        raise ValueError(f"unknown method(s)/pipeline(s) {unknown}; methods {method_names()}, pipelines {PIPELINES}")
    if "per-request" in pipelines:
        missing = [m for m in methods if _reference(m) is None]
        if missing:
            raise ValueError(f"method(s) {missing} have no per-request reference pipeline; use --pipelines ours")
_STATISTICS = {"ours": batched_statistics, "per-request": per_layer_statistics}
_EDIT_STAGES = ("validate", "contexts", "targets", "keys", "solve", "write_back")

@dataclass
class SpeedConfig:
    """Settings of :func:`run_speed` (see ``zerounlearn bench-speed --help``)."""

    hparams: str = "hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml"
    ns: List[int] = field(default_factory=lambda: [10, 50, 200, 1000])
    methods: List[str] = field(default_factory=method_names)
    pipelines: List[str] = field(default_factory=lambda: list(PIPELINES))
    data: str = "counterfact"
    data_path: Optional[str] = None
    seed: int = 0
    model: Optional[str] = None
    random_config: Optional[str] = None
    tokenizer: str = "smollm2"
    device: Optional[str] = None
    corpus: Optional[str] = None
    stats_passages: Optional[int] = None
    micro_passages: int = 300
    layers: Optional[List[int]] = None
    eval_batch_size: int = 32
    out: str = "results/speed/speed.json"
    progress: bool = True
    # targets optimisers for the ``ours`` pipeline (None: the YAML's ``targets_optimizer``); the
    # first one is compared with the per-request pipeline, every one is listed in ``optimizers``
    targets_optimizers: Optional[List[str]] = None

    def resolved_device(self) -> str:
        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")


def parse_int_list(text: str) -> List[int]:
    """``"10,50,200"`` -> ``[10, 50, 200]`` (positive integers)."""
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or any(v < 1 for v in values):
        raise ValueError(f"expected a comma list of positive integers, got {text!r}")
    return values


# --------------------------------------------------------------------------- model and hparams


def _load_model(cfg: SpeedConfig, hp: EditHyperParams, device: str):
    from transformers import AutoTokenizer

    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer, resolve_model_path

    if cfg.random_config is None:
        return load_model_and_tokenizer(cfg.model or hp.model_name, device=device)
    tok = AutoTokenizer.from_pretrained(resolve_model_path(cfg.tokenizer))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    vocab = len(tok) if cfg.random_config == "tiny" else None
    return build_random_model(cfg.random_config, device, vocab), tok


def _method_hparams(
    path: str, overrides: Dict[str, Any], methods: Optional[Sequence[str]] = None
) -> Dict[str, EditHyperParams]:
    """The ``methods``' hparams (``path``'s method first): ``path`` and the file of the same name in the
    other method's folder (only read when that method is benchmarked); ``methods`` default: every registered
    editing method."""
    methods = method_names() if methods is None else methods
    main = Path(path)
    alg = load_config_file(main).get("alg_name")
    if alg not in method_names():
        raise HParamsError(f"{path}: alg_name must be one of {method_names()}, got {alg!r}")
    result = {}
    for method in [alg] + [m for m in methods if m != alg]:
        entry = get_method(method)
        file = main if method == alg else main.parent.parent / entry.folder / main.name
        hp = entry.hparams_class.from_hparams(file)
        result[method] = hp.replace(**overrides) if overrides else hp
    return result


# --------------------------------------------------------------------------- stages


def _statistics_row(model, tok, hp: EditHyperParams, corpus: str, pipeline: str, device, progress: bool):
    """Time the pipeline's statistics stage on an empty cache; returns (row, moments)."""
    with tempfile.TemporaryDirectory(prefix="zerounlearn_speed_stats_") as tmp:
        stats_hp = hp.replace(stats_dir=tmp)
        with MemoryMeter(device) as mem:
            start = time.perf_counter()
            moments = _STATISTICS[pipeline](model, tok, stats_hp, corpus, progress)
            sync_device(device)
            seconds = time.perf_counter() - start
    tokens = next(iter(moments.values())).count
    passes = 1 if pipeline == "ours" else 2 * len(hp.layers)
    row = {
        "pipeline": pipeline,
        "layers": list(hp.layers),
        "passages": hp.mom2_n_samples,
        "corpus_passes": passes,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "s_per_1k_tokens": seconds / (tokens / 1000.0),
        **mem.as_dict(),
    }
    return row, moments


def _micro_statistics(model, tok, hp: EditHyperParams, corpus: str, passages: int, device, progress: bool):
    """All edited layers in one pass vs one layer in one pass vs one pass per layer."""
    texts = load_corpus(corpus, limit=passages).texts
    modules = [hp.rewrite_module_tmp.format(l) for l in hp.layers]
    product = torch.float64 if hp.mom2_dtype == "float64" else torch.float32
    args = (hp.mom2_max_length, STATS_BATCH_SIZE, progress, product)
    rows = []

    def measure(mode: str, groups: Sequence[Sequence[str]]) -> None:
        with MemoryMeter(device) as mem:
            start = time.perf_counter()
            counts = [
                next(iter(collect_second_moments(model, tok, texts, list(g), *args).values())).count for g in groups
            ]
            sync_device(device)
            seconds = time.perf_counter() - start
        rows.append({"mode": mode, "modules": [list(g) for g in groups], "passes": len(groups), "tokens": counts[0],
                     "seconds": seconds, "tokens_per_s": counts[0] / seconds, **mem.as_dict()})

    measure(f"all {len(modules)} layers, one pass", [modules])
    measure(f"one layer ({hp.layers[-1]}), one pass", [modules[-1:]])
    measure(f"one pass per layer ({len(modules)} passes)", [[m] for m in modules])
    base, base_cpu = rows[0]["seconds"], rows[0]["cpu_s"]
    for row in rows:
        row["ratio_vs_one_pass"] = row["seconds"] / base
        row["cpu_ratio_vs_one_pass"] = row["cpu_s"] / base_cpu
    return {"passages": len(texts), "rows": rows}


def _edited_weights(model: nn.Module, hp: EditHyperParams) -> Dict[int, torch.Tensor]:
    return {
        l: get_weight_matrix(get_module(model, hp.rewrite_module_tmp.format(l))).detach().float().cpu().clone()
        for l in hp.layers
    }


def _edit_row(model, tok, cases, hp, method: str, pipeline: str, moments, device, eval_batch_size: int):
    """One timed edit (statistics given), one forget-prompt evaluation, then restore."""
    from zerounlearn_editor.evaluation.metrics import evaluate_probes

    requests = [dict(case.request) for case in cases]
    clear_context_prefixes(model)  # the context stage is part of every timed edit
    report = EditReport()
    # stats_dir is a folder that does not exist: the statistics are given, and no cache (the null space's
    # eigendecomposition, engine/stats/eigen_cache.py) is read, so every timed edit computes all of its stages.
    with tempfile.TemporaryDirectory(prefix="zerounlearn_speed_edit_") as tmp, MemoryMeter(device) as mem:
        uncached = hp.replace(stats_dir=str(Path(tmp) / "absent"))
        start = time.perf_counter()
        _, weights_copy = _apply(method, pipeline)(
            model, tok, requests, uncached, return_orig_weights=True, second_moments=moments, progress=False,
            report=report,
            allow_large_batch=True,  # timings of large n, where ZeroUnlearn alone would refuse
            fluency_guard="off",  # the method's time, comparable with the earlier runs (the guard reads only)
            answer_check=False,  # likewise the scoring of the answers after the edit
        )
        sync_device(device)
        total = time.perf_counter() - start
    try:
        weights = _edited_weights(model, hp)
        probes = [p for case in cases for p in case.forget]
        with MemoryMeter(device) as eval_mem:
            start = time.perf_counter()
            scores = evaluate_probes(model, tok, probes, batch_size=eval_batch_size)
            sync_device(device)
            eval_seconds = time.perf_counter() - start
    finally:
        restore_weights(model, weights_copy)
    row = {
        "method": method,
        "pipeline": pipeline,
        "n": len(requests),
        "stages_s": {stage: report.timings.get(stage, 0.0) for stage in _EDIT_STAGES},
        "edit_s": total,
        **{f"edit_{k}": v for k, v in mem.as_dict().items()},
        "eval_s": eval_seconds,
        "eval_probes": len(probes),
        "eval_forget_acc": sum(scores["acc"]) / max(len(scores["acc"]), 1),
        **{f"eval_{k}": v for k, v in eval_mem.as_dict().items()},
        "target_steps_mean": sum(report.target_steps) / max(len(report.target_steps), 1),
        "target_nll_mean": sum(report.target_nll) / max(len(report.target_nll), 1),
    }
    return row, weights


def _weight_gap(a: Dict[int, torch.Tensor], b: Dict[int, torch.Tensor]) -> Dict[str, float]:
    abs_diff = max(float((a[l] - b[l]).abs().max()) for l in a)
    scale = max(float(a[l].abs().max()) for l in a)
    return {"max_abs_diff": abs_diff, "max_rel_diff": abs_diff / scale if scale else abs_diff}


# --------------------------------------------------------------------------- driver


def _environment(device: torch.device, model: nn.Module) -> Dict[str, Any]:
    env = {
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "model": getattr(model.config, "_name_or_path", type(model).__name__),
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    try:
        env["load_average"] = os.getloadavg()
    except OSError:
        pass
    return env


def _write_json(path: Path, data: Dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def _check_inputs(cfg: SpeedConfig) -> Dict[str, EditHyperParams]:
    """Check the methods, device, hparams, optimisers, corpus and data before the model loads; returns the
    methods' hparams (``cfg.layers`` applied)."""
    from zerounlearn_editor.data import load_cases
    from zerounlearn_editor.data.corpus import check_corpus_source
    from zerounlearn_editor.support.model_zoo import check_device

    _check_methods(cfg.methods, cfg.pipelines)
    check_device(cfg.resolved_device())  # '--device cuda' on a CPU build: named here, not an AssertionError later
    overrides: Dict[str, Any] = {}
    if cfg.layers:
        overrides["layers"] = list(cfg.layers)
    hps = _method_hparams(cfg.hparams, overrides, cfg.methods)
    main = hps[cfg.methods[0]]
    for optimizer in cfg.targets_optimizers or []:  # a retired or unknown optimiser fails here, before the model
        try:
            main.replace(targets_optimizer=optimizer)
        except HParamsError as exc:
            raise HParamsError(f"--targets-optimizers {optimizer!r}: {exc}") from exc
    # bad data / corpus arguments fail here, before the model and the statistics
    check_corpus_source(cfg.corpus or main.mom2_dataset)
    if any(n < 1 for n in cfg.ns):
        raise ValueError(f"--n: request counts must be >= 1, got {list(cfg.ns)}")
    load_cases(cfg.data, path=cfg.data_path, n=min(cfg.ns), seed=cfg.seed)
    return hps


def _run_statistics(
    cfg: SpeedConfig, model, tok, main: EditHyperParams, device, result: Dict[str, Any], out: Path
) -> Dict[int, SecondMoment]:
    """The statistics stage of every pipeline (``ours`` first) and the micro-benchmark, appended to ``result``
    (written to ``out`` after each); returns the ``ours`` pipeline's second moments, by layer."""
    corpus = cfg.corpus or main.mom2_dataset
    stats_hp = main.replace(mom2_n_samples=cfg.stats_passages or main.mom2_n_samples)
    moments: Optional[Dict[int, SecondMoment]] = None
    for pipeline in ["ours"] + [p for p in cfg.pipelines if p != "ours"]:
        row, stage_moments = _statistics_row(model, tok, stats_hp, corpus, pipeline, device, cfg.progress)
        LOG.info("statistics %s: %.1f s, %.0f tokens/s", pipeline, row["seconds"], row["tokens_per_s"])
        result["statistics"].append(row)
        moments = moments if moments is not None else stage_moments
        _write_json(out, result)
    if cfg.micro_passages > 0:
        result["statistics_micro"] = _micro_statistics(
            model, tok, main, corpus, cfg.micro_passages, device, cfg.progress
        )
        _write_json(out, result)
    return moments


def _run_method_edits(
    cfg: SpeedConfig, model, tok, cases, hp: EditHyperParams, method: str, moments, device,
    result: Dict[str, Any], out: Path,
):
    """Every timed edit of ``method`` on ``cases`` (each pipeline; each targets optimiser on ``ours``), appended to
    ``result["edits"]`` (written to ``out`` after each). Returns ``(rows, weights)`` keyed ``ours``,
    ``per-request`` or ``ours:<optimizer>`` for the optimisers after the first."""
    layer_moments = {l: moments[l] for l in hp.layers}
    weights: Dict[str, Dict[int, torch.Tensor]] = {}
    rows: Dict[str, Dict[str, Any]] = {}
    optimizers = cfg.targets_optimizers or [hp.targets_optimizer]
    runs = [(p, o) for p in cfg.pipelines for o in (optimizers if p == "ours" else ["adam"])]
    for pipeline, optimizer in runs:
        LOG.info("edit: %s, %s pipeline (targets %s), n=%d", method, pipeline, optimizer, len(cases))
        run_hp = hp.replace(targets_optimizer=optimizer) if optimizer != hp.targets_optimizer else hp
        row, w = _edit_row(model, tok, cases, run_hp, method, pipeline, layer_moments, device, cfg.eval_batch_size)
        row["targets_optimizer"] = optimizer
        LOG.info("  %.1f s (%s)", row["edit_s"], {k: round(v, 2) for k, v in row["stages_s"].items()})
        result["edits"].append(row)
        key = pipeline if pipeline != "ours" or optimizer == optimizers[0] else f"ours:{optimizer}"
        rows[key], weights[key] = row, w
        _write_json(out, result)
    return rows, weights


def _optimizer_rows(method: str, n: int, rows: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per ``ours`` edit of ``method`` (each targets optimiser) against the ``per-request`` edit."""
    reference = rows.get("per-request")
    return [
        {
            "method": method, "n": n, "targets_optimizer": row["targets_optimizer"],
            "edit_s": row["edit_s"], "edit_cpu_s": row["edit_cpu_s"], "targets_s": row["stages_s"]["targets"],
            "target_nll_mean": row["target_nll_mean"], "target_steps_mean": row["target_steps_mean"],
            "eval_forget_acc": row["eval_forget_acc"],
            "per_request_over_this": reference["edit_s"] / row["edit_s"] if reference else None,
            "per_request_over_this_cpu": reference["edit_cpu_s"] / row["edit_cpu_s"] if reference else None,
        }
        for key, row in rows.items()
        if key != "per-request"
    ]


def _comparison(method: str, n: int, rows: Dict[str, Dict[str, Any]], weights) -> Dict[str, Any]:
    """The ``ours`` edit against the ``per-request`` edit of ``method``: times, ratios and the edited weights' gap
    (a warning when the relative gap is over 1e-3)."""
    gap = _weight_gap(weights["ours"], weights["per-request"])
    comparison = {
        "method": method,
        "n": n,
        # the reference runs the paper's Adam loop; ours the first of --targets-optimizers (default: the
        # YAML's, adam_kv unless set): the weights agree to float rounding with adam or adam_kv
        "ours_targets_optimizer": rows["ours"]["targets_optimizer"],
        "ours_s": rows["ours"]["edit_s"],
        "per_request_s": rows["per-request"]["edit_s"],
        "ratio": rows["per-request"]["edit_s"] / rows["ours"]["edit_s"],
        "ours_cpu_s": rows["ours"]["edit_cpu_s"],
        "per_request_cpu_s": rows["per-request"]["edit_cpu_s"],
        "cpu_ratio": rows["per-request"]["edit_cpu_s"] / rows["ours"]["edit_cpu_s"],
        **gap,
    }
    if gap["max_rel_diff"] > 1e-3:
        LOG.warning(
            "%s n=%d: edited weights differ between pipelines (max rel diff %.2e)", method, n, gap["max_rel_diff"]
        )
    return comparison


def run_speed(cfg: SpeedConfig) -> Dict[str, Any]:
    """Run the benchmark, write ``cfg.out`` (JSON, rewritten after every row) and return it."""
    from zerounlearn_editor.data import load_cases

    hps = _check_inputs(cfg)
    main = hps[cfg.methods[0]]
    device = torch.device(cfg.resolved_device())
    model, tok = _load_model(cfg, main, str(device))
    out = Path(cfg.out)
    result: Dict[str, Any] = {
        "config": dataclasses.asdict(cfg),
        "environment": _environment(device, model),
        "statistics": [],
        "statistics_micro": None,
        "edits": [],
        "comparisons": [],
        "optimizers": [],
    }
    LOG.info("speed bench on %s: %s", device, result["environment"])
    with torch.no_grad():  # warm-up: first-call allocations and kernels stay out of the timings
        model(input_ids=torch.tensor([tok("The capital of France is")["input_ids"]], device=device))
    moments = _run_statistics(cfg, model, tok, main, device, result, out)
    for n in cfg.ns:
        cases = load_cases(cfg.data, path=cfg.data_path, n=n, seed=cfg.seed)
        for method in cfg.methods:
            rows, weights = _run_method_edits(cfg, model, tok, cases, hps[method], method, moments, device, result, out)
            result["optimizers"].extend(_optimizer_rows(method, len(cases), rows))
            if "ours" in rows and "per-request" in rows:
                result["comparisons"].append(_comparison(method, len(cases), rows, weights))
                _write_json(out, result)
    result["markdown"] = format_speed_markdown(result)
    _write_json(out, result)
    return result
