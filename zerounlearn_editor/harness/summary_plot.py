"""``zerounlearn plot``: Eff vs Spe and Eff vs PPL scatter from bench ``summary.json`` files.

Every (summary, method) pair with an ``eff`` value is one point, at the mean over seeds with the
sample std as error bars (``summary["methods"][name]["metrics"][key]`` = ``{"mean", "std", ...}``,
as :func:`zerounlearn_editor.harness.report.summarize` writes it). Points of one method share a
colour and are joined in order of Eff, so a sweep (one summary per setting) draws that method's
trade-off front. Points are labelled with the run's name (the summary's ``name``, else its folder).

The ``results.json`` of ``benchmarks/surgical/harness.py`` (``{"run": {...}, "seeds": {seed: {variant: {"metrics":
{...}}}}}``) is read too: one point per variant (``base`` included), mean and sample std over its seeds, or
over the seeds asked for, so a knob sweep of that harness lands on the same axes as the bench's methods.
"""
from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = ["collect_points", "format_points", "plot_summaries"]

LOG = logging.getLogger(__name__)
PANELS = (("spe", "Spe ↑ (neighbour accuracy, %)"), ("ppl", "PPL ↓"))


def _run_label(path: Path, summary: Dict[str, Any]) -> str:
    return str(summary.get("name") or path.parent.name or path.stem)


def _surgical_points(path: Path, results: Dict[str, Any], methods: Optional[Sequence[str]],
                     seeds: Optional[Sequence[int]]) -> List[Dict[str, Any]]:
    """Points of a ``benchmarks/surgical/harness.py`` results.json (its ``seeds`` a mapping): one per variant, over its
    (selected) seeds."""
    chosen = {str(s) for s in seeds} if seeds is not None else None
    rows: Dict[str, List[Dict[str, Any]]] = {}
    for seed, record in results["seeds"].items():
        if chosen is not None and seed not in chosen:
            continue
        for name, item in record.items():
            metrics = item.get("metrics") if isinstance(item, dict) else None
            if not isinstance(metrics, dict):
                raise ValueError(f"{path}: seeds.{seed}.{name} has no 'metrics' mapping")
            rows.setdefault(name, []).append(metrics)
    points = []
    for name, found in rows.items():
        if methods and name not in methods:
            continue
        point: Dict[str, Any] = {
            "run": path.parent.name or path.stem,
            "method": name,
            "file": str(path),
            "seeds": len(found),
        }
        for key in ("eff", "spe", "ppl"):
            values = [float(m[key]) for m in found if m.get(key) is not None]
            point[key] = statistics.fmean(values) if values else None
            point[f"{key}_std"] = (statistics.stdev(values) if len(values) > 1 else 0.0) if values else None
        if point["eff"] is not None:
            points.append(point)
    return points


def collect_points(paths: Sequence[Union[str, Path]], methods: Optional[Sequence[str]] = None,
                   seeds: Optional[Sequence[int]] = None) -> List[Dict[str, Any]]:
    """One dict per (summary, method): ``{"run", "method", "eff", "eff_std", "spe", "spe_std", "ppl", "ppl_std",
    "seeds"}``.

    ``seeds``: for surgical results.json files, use only these seeds (bench summaries hold their
    aggregates already and are taken as they are).

    Raises:
        ValueError: a file that is neither a bench summary nor a surgical results.json (names the
            file and the missing key), or a ``seeds`` selection that leaves a surgical file empty.
    """
    points: List[Dict[str, Any]] = []
    for raw in paths:
        path = Path(raw)
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"summary file not found: {path}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from exc
        if isinstance(summary, dict) and "methods" not in summary and isinstance(summary.get("seeds"), dict):
            found = _surgical_points(path, summary, methods, seeds)
            if not found and seeds is not None:
                raise ValueError(f"{path}: no variant has a result for seeds {list(seeds)}")
            points.extend(found)
            continue
        if not isinstance(summary, dict) or not isinstance(summary.get("methods"), dict):
            raise ValueError(f"{path}: not a bench summary.json (no 'methods' mapping)")
        if seeds is not None:
            LOG.warning(
                "%s: a bench summary holds its seeds' aggregate; --seeds applies to surgical results only", path
            )
        for name, item in summary["methods"].items():
            if methods and name not in methods:
                continue
            metrics = item.get("metrics") if isinstance(item, dict) else None
            if not isinstance(metrics, dict):
                raise ValueError(f"{path}: methods.{name} has no 'metrics' mapping")
            if "eff" not in metrics:
                continue  # skipped / failed method
            point: Dict[str, Any] = {"run": _run_label(path, summary), "method": name, "file": str(path),
                                     "seeds": len(item.get("seeds", []))}
            for key in ("eff", "spe", "ppl"):
                stats = metrics.get(key)
                if stats is not None and not {"mean", "std"} <= set(stats):
                    raise ValueError(f"{path}: methods.{name}.metrics.{key} needs 'mean' and 'std'")
                point[key] = None if stats is None else float(stats["mean"])
                point[f"{key}_std"] = None if stats is None else float(stats["std"])
            points.append(point)
    return points


def format_points(points: Sequence[Dict[str, Any]]) -> str:
    """Markdown table of the plotted points."""
    def cell(p: Dict[str, Any], key: str, fmt: str) -> str:
        return "-" if p[key] is None else f"{fmt.format(p[key])} ± {fmt.format(p[key + '_std'])}"

    lines = ["| Run | Method | Eff ↓ | Spe ↑ | PPL ↓ | Seeds |", "|---|---|---|---|---|---|"]
    for p in points:
        lines.append(f"| {p['run']} | {p['method']} | {cell(p, 'eff', '{:.1f}')} | {cell(p, 'spe', '{:.1f}')} | "
                     f"{cell(p, 'ppl', '{:.2f}')} | {p['seeds']} |")
    return "\n".join(lines)


def plot_summaries(points: Sequence[Dict[str, Any]], out: Union[str, Path], label_runs: bool = True) -> Optional[Path]:
    """Draw the two panels into ``out``; None (with a logged message) without matplotlib."""
    plt = pyplot('the summary plot')
    if plt is None:
        return None
    if not points:
        raise ValueError("no method with an Eff value in the given summaries")
    methods = list(dict.fromkeys(p["method"] for p in points))
    colours = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (key, label) in zip(axes, PANELS):
        drawn = False
        for method in methods:
            mine = sorted((p for p in points if p["method"] == method and p[key] is not None), key=lambda p: p["eff"])
            if not mine:
                continue
            drawn = True
            ax.errorbar([p["eff"] for p in mine], [p[key] for p in mine], xerr=[p["eff_std"] for p in mine],
                        yerr=[p[f"{key}_std"] for p in mine], fmt="o-" if len(mine) > 1 else "o", color=colours[method],
                        label=method, capsize=2, markersize=4, linewidth=0.8)
            if label_runs and len({p["run"] for p in points}) > 1:
                for p in mine:
                    ax.annotate(p["run"], (p["eff"], p[key]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        if not drawn:
            ax.text(0.5, 0.5, f"no {key} in these summaries", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("Eff ↓ (forget-prompt accuracy, %)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out)
