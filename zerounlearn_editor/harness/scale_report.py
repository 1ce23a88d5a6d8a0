"""The scale runs' summaries, tables and plot, from the stored rows and rounds (mean ± std over seeds):
:func:`write_batch_summary` (``scale_batch_summary.json``, ``scale_batch.md``) and :func:`write_stream_summary`
(``scale_stream_summary.json``, ``scale_stream.md``, ``scale_stream.png``)."""
from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from zerounlearn_editor.harness.scale_rows import BATCH_ROWS, STREAMS, record_tag
from zerounlearn_editor.support.files import read_json, write_json_atomic, write_text_atomic
from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = [
    "BATCH_COLUMNS", "STREAM_COLUMNS", "write_batch_summary", "format_batch_table", "write_stream_summary",
    "format_stream_table", "plot_stream",
]


def _mean_std(values: Sequence[Optional[float]]) -> Optional[Dict[str, float]]:
    vals = [float(v) for v in values if v is not None and v == v]  # None and NaN: not measured
    if not vals:
        return None
    mean = fmean(vals)
    std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
    return {"mean": mean, "std": std, "n": len(vals)}


def _derived(metrics: Mapping[str, Any], base: Mapping[str, Any]) -> Dict[str, Any]:
    out = dict(metrics)
    if base.get("spe"):
        out["spe_pct"] = 100.0 * metrics["spe"] / base["spe"]
    if metrics.get("ppl") is not None and base.get("ppl"):
        out["ppl_pct"] = 100.0 * (metrics["ppl"] / base["ppl"] - 1.0)
    return out


def _cell(stats: Optional[Mapping[str, Any]], fmt: str) -> str:
    if not stats:
        return "-"
    return fmt.format(stats["mean"]) + (f" ± {fmt.format(stats['std']).lstrip('+')}" if stats["n"] > 1 else "")


def _ppl_note(tokens: Iterable[Optional[int]]) -> List[str]:
    """The line under a table that says on how many tokens PPL was measured (the tokens scored, which a short
    text makes fewer than ``--ppl-tokens``); none without a perplexity."""
    counts = sorted({t for t in tokens if t})
    return ["", f"PPL: perplexity on the first {' / '.join(map(str, counts))} tokens of the text."] if counts else []


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


def _batch_rows(out: Path) -> Dict[Tuple[str, int], List[Dict[str, Any]]]:
    rows: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}
    for path in sorted(Path(out).glob(BATCH_ROWS)):
        record = read_json(path)
        rows.setdefault((record_tag(record), int(record["n"])), []).append(record)
    return rows


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
