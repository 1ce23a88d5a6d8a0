"""``zerounlearn utility``: downstream accuracy of the unedited model and after each method.

For every method (``base`` = no edit) the model is edited with the forget requests (``n_forget``
cases of ``data`` drawn with ``seed``, the bench's draw), every task is scored, and the weights
are restored bit-identically (checked with the bench's fingerprint). Methods are the bench's
(:func:`~zerounlearn_editor.harness.method_rows.default_registry`), with the same hyperparameter lookup.

Output JSON (``out``)::

    {"model": ..., "hparams": ..., "methods": [...], "method": <first edited method or "base">,
     "settings": {"n", "shots", "seed", "data", "n_forget", "retain", "batch_size"},
     "tasks": {task: {"accuracy", "n", "chance", "pred_fraction", "gold_fraction", "correct"}},  # first method
     "results": {method: {"tasks": {...}, "edit_seconds", "case_ids"}}}

``tasks`` repeats the first listed method's scores (the single-method form the issue asks for).

Retain-aware rows (``ZeroUnlearn-GD+R``) need ``retain`` (``POLICY:K``, the bench's
:func:`~zerounlearn_editor.harness.retain_sets.draw_retain` over the whole dataset, checked disjoint from the
forget cases); the drawn requests are stored under ``results[<method>]["retain"]``.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from torch import nn

from zerounlearn_editor.evaluation.utility.scoring import score_tasks
from zerounlearn_editor.evaluation.utility.tasks import TASKS, load_task_items, parse_tasks
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = ["UtilityConfig", "run_utility", "plot_utility", "format_utility_table"]

LOG = logging.getLogger(__name__)
DEFAULT_SHOTS = 3


@dataclass
class UtilityConfig:
    """One ``zerounlearn utility`` run (see the module docstring)."""

    hparams: str
    tasks: List[str]
    out: str
    n: Optional[int] = 50
    shots: int = DEFAULT_SHOTS
    seed: int = 0
    methods: List[str] = field(default_factory=lambda: ["base"])
    data: Optional[str] = None
    data_path: Optional[str] = None
    n_forget: int = 10
    retain: Optional[str] = None
    method_hparams: Dict[str, str] = field(default_factory=dict)
    model: Optional[str] = None
    device: str = "cpu"
    batch_size: int = 8
    data_dir: Optional[str] = None
    plot: Optional[str] = None
    progress: bool = True


def _data_dir(config: UtilityConfig) -> Path:
    if config.data_dir:
        return Path(config.data_dir)
    from zerounlearn_editor.support.resources import shared_data_dir

    base = shared_data_dir()
    if base is None:
        raise FileNotFoundError(
            "utility data not found: pass --data-dir or set ZEROUNLEARN_DATA_DIR to the shared data folder"
        )
    return base / "utility"


def _check_methods(config: UtilityConfig, registry: Mapping[str, Any]):
    """The edited methods (every one but ``base``) and the parsed ``--retain`` draw, checked against the
    registry (retired and unknown names), ``--data`` and the retain-aware rows; raises ``ValueError``."""
    from zerounlearn_editor.harness.bench_config import retired_method_error
    from zerounlearn_editor.harness.retain_sets import parse_retain_spec

    edited = [m for m in config.methods if m != "base"]
    retired = [retired_method_error(m) for m in edited if m not in registry and retired_method_error(m)]
    if retired:
        raise ValueError("; ".join(retired))
    unknown = [m for m in edited if m not in registry]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from base, {', '.join(registry)}")
    if edited and not config.data:
        raise ValueError(f"methods {edited} edit the model: pass --data (and --n-forget)")
    draw = parse_retain_spec(config.retain)
    # the bench's retain-aware rows are named "<Method>+R" (harness.method_specs gives exactly those uses_retain)
    needing = [m for m in edited if m.endswith("+R")]
    if needing and draw is None:
        raise ValueError(f"methods {needing} are retain-aware: pass --retain POLICY:K (e.g. same-answer:10)")
    if draw is not None and not needing:
        raise ValueError("--retain is used only by the retain-aware rows (ZeroUnlearn-GD+R); none was asked for")
    return edited, draw


def _forget_sets(config: UtilityConfig, draw):
    """``(cases, requests, retain)``: the ``n_forget`` cases of ``config.data`` drawn with ``seed``, their
    requests, and the retain requests of ``draw`` (empty without a draw)."""
    from zerounlearn_editor.data.datasets import load_cases, sample_cases
    from zerounlearn_editor.harness.retain_sets import draw_retain

    pool = list(load_cases(config.data, path=config.data_path))
    cases = sample_cases(pool, config.n_forget, config.seed)
    requests = [dict(c.request) for c in cases]
    retain = draw_retain(draw, cases, pool, config.seed) if draw is not None else []  # disjoint from the cases
    return cases, requests, retain


def _score_edited(config: UtilityConfig, model, tok, method, task_items, cases, requests, retain, bank):
    """Edit with the prepared ``method``, score every task, restore the weights; the method's result entry."""
    from zerounlearn_editor.engine.pipeline import restore_weights

    start = time.perf_counter()
    extra = {"retain": [dict(r) for r in retain]} if method.uses_retain else {}
    outcome = method.edit(model, tok, [dict(r) for r in requests], bank, **extra)
    seconds = time.perf_counter() - start
    try:
        scores = score_tasks(model, tok, task_items, config.batch_size, config.progress)
    finally:
        restore_weights(model, outcome.weights_copy)
    return {"tasks": scores, "edit_seconds": seconds, "case_ids": [c.case_id for c in cases],
            **({"retain": extra["retain"]} if extra else {})}


def run_utility(config: UtilityConfig, model: Optional[nn.Module] = None, tok: Any = None) -> Dict[str, Any]:
    """Score every method on every task, write ``config.out`` (and the chart); returns the JSON."""
    from zerounlearn_editor.harness.method_rows import default_registry
    from zerounlearn_editor.harness.method_specs import HParamsLookup, MethodContext, load_main_hparams
    from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
    from zerounlearn_editor.harness.stages import compute_statistics

    tasks = parse_tasks(config.tasks)
    registry = default_registry()
    edited, draw = _check_methods(config, registry)
    data_dir = _data_dir(config)
    task_items = {name: load_task_items(name, data_dir, config.n, config.shots, config.seed) for name in tasks}
    lookup = HParamsLookup(Path(config.hparams), load_main_hparams(config.hparams), dict(config.method_hparams))
    model_name = str(config.model or lookup.main.model_name)
    if model is None:
        from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

        model, tok = load_model_and_tokenizer(model_name, device=config.device)
    cases, requests, retain = _forget_sets(config, draw) if edited else ([], [], [])
    results: Dict[str, Dict[str, Any]] = {}
    fingerprint = ModelFingerprint.of(model)
    prepared = {}
    bank: Dict[str, Any] = {}
    if edited:
        neutral = lookup.main.neutral_target or tok.eos_token or ""
        context = MethodContext(lookup, model, tok, Path(config.out).parent, neutral)
        prepared = {m: registry[m].prepare(context) for m in edited}
        bank = compute_statistics(model, tok, lookup, list(prepared.values()), config.progress)
    for name in config.methods:
        fingerprint.verify(model, f"utility: before {name}")
        if name == "base":
            results[name] = {
                "tasks": score_tasks(model, tok, task_items, config.batch_size, config.progress),
                "edit_seconds": None,
            }
        elif prepared[name].skip_reason is not None:
            LOG.warning("%s %s", name, prepared[name].skip_reason)
            results[name] = {"tasks": {}, "skipped": prepared[name].skip_reason}
        else:
            results[name] = _score_edited(config, model, tok, prepared[name], task_items, cases, requests, retain, bank)
    fingerprint.verify(model, "utility: after the last method")
    payload = {
        "model": model_name,
        "hparams": config.hparams,
        "method": edited[0] if edited else "base",
        "methods": list(config.methods),
        "settings": {"n": config.n, "shots": config.shots, "seed": config.seed, "data": config.data,
                     "n_forget": config.n_forget if edited else None,
                     "retain": draw.spec if draw is not None else None, "batch_size": config.batch_size,
                     "data_dir": str(data_dir)},
        "tasks": results[config.methods[0]]["tasks"],
        "results": results,
    }
    write_json_atomic(config.out, payload)
    if config.plot:
        plot_utility(payload, config.plot)
    return payload


def format_utility_table(payload: Mapping[str, Any]) -> str:
    """Markdown: one row per method, one column per task (accuracy x100), chance in the header."""
    results = payload["results"]
    tasks = [t for t in TASKS if any(t in r.get("tasks", {}) for r in results.values())]
    chance = {t: next(r["tasks"][t]["chance"] for r in results.values() if t in r.get("tasks", {})) for t in tasks}
    lines = ["| Method | " + " | ".join(f"{t} (chance {100 * chance[t]:.0f})" for t in tasks) + " |",
             "|---|" + "---|" * len(tasks)]
    for name, result in results.items():
        cells = [f"{100 * result['tasks'][t]['accuracy']:.1f}" if t in result.get("tasks", {}) else "-" for t in tasks]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_utility(payload: Mapping[str, Any], path: str) -> Optional[Path]:
    """Grouped bar chart (x = task, one bar per method, dashed chance line); None without matplotlib."""
    plt = pyplot('the utility chart')
    if plt is None:
        return None
    results = {k: v for k, v in payload["results"].items() if v.get("tasks")}
    tasks = [t for t in TASKS if any(t in r["tasks"] for r in results.values())]
    width = 0.8 / max(len(results), 1)
    fig, ax = plt.subplots(figsize=(1.4 * len(tasks) + 2, 3.6))
    for j, (name, result) in enumerate(results.items()):
        xs = [i + (j - (len(results) - 1) / 2) * width for i in range(len(tasks))]
        ax.bar(xs, [100 * result["tasks"].get(t, {}).get("accuracy", float("nan")) for t in tasks], width, label=name)
    for i, t in enumerate(tasks):
        chance = next(r["tasks"][t]["chance"] for r in results.values() if t in r["tasks"])
        ax.hlines(100 * chance, i - 0.45, i + 0.45, colors="k", linestyles="dashed", linewidth=0.8)
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels(tasks)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"General capabilities: {Path(str(payload['model'])).name} (dashed: chance)")
    ax.legend(fontsize=8, ncol=min(len(results), 4))
    fig.tight_layout()
    return save_figure(fig, path)
