"""The sequential-unlearning bench's summary (:func:`summarize_rounds`: mean ± std over seeds per method and round),
its tables (:func:`format_rounds`, :func:`rounds_markdown`: ``rounds.md``) and plot (:func:`plot_rounds`:
``rounds.png``, when matplotlib is importable)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from zerounlearn_editor.harness.bench_config import BenchConfig
from zerounlearn_editor.harness.report import aggregate
from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = ["ROUND_METRICS", "summarize_rounds", "format_rounds", "rounds_markdown", "plot_rounds"]


ROUND_METRICS = (
    ("eff", "Eff ↓", "{:.1f}"),
    ("gen", "Gen ↓", "{:.1f}"),
    ("spe", "Spe ↑", "{:.1f}"),
    ("ppl", "PPL ↓", "{:.2f}"),
    ("eff_round", "Eff this round ↓", "{:.1f}"),
    ("edit_seconds", "Edit s", "{:.1f}"),
)


def summarize_rounds(
    methods: Sequence[str], records: Mapping[int, Mapping[str, Any]], rounds: int, n: int
) -> Dict[str, Any]:
    """Mean/std over seeds of every metric, per method and round (round 0 = unedited, ``batch``)."""
    keys = [k for k, _, _ in ROUND_METRICS]

    def agg(entries: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
        return {k: a for k in keys if (a := aggregate([e["metrics"].get(k) for e in entries])) is not None}

    bases = [r["base"] for r in records.values() if "base" in r]
    out: Dict[str, Any] = {"rounds": rounds, "n": n, "base": agg(bases), "methods": {}}
    for name in methods:
        entries = [r["methods"].get(name) for r in records.values()]
        ok = [e for e in entries if e and e.get("status") == "ok"]
        item: Dict[str, Any] = {"seeds": len(ok), "rounds": [], "batch": None}
        if ok:
            item["rounds"] = [
                {"round": k + 1, "forgotten": (k + 1) * n, "metrics": agg([e["rounds"][k] for e in ok])}
                for k in range(rounds)
            ]
            item["batch"] = {"forgotten": rounds * n, "metrics": agg([e["batch"] for e in ok])}
        else:
            item["reason"] = "; ".join(sorted({e.get("reason", "no result") for e in entries if e})) or "no result"
        out["methods"][name] = item
    return out


def _cell(stats: Optional[Mapping[str, Any]], fmt: str) -> str:
    if not stats:
        return "-"
    return fmt.format(stats["mean"]) + (f" ± {fmt.format(stats['std'])}" if stats["n"] > 1 else "")


def format_rounds(summary: Mapping[str, Any]) -> str:
    """One markdown table per method: rows = rounds (+ unedited, + one batch of all facts)."""
    lines: List[str] = []
    header = "| Round | Facts forgotten | " + " | ".join(h for _, h, _ in ROUND_METRICS) + " |"
    rule = "|---|---|" + "---|" * len(ROUND_METRICS)
    for name, item in summary["methods"].items():
        lines += [f"### {name}", ""]
        if not item["rounds"]:
            lines += [f"no result: {item.get('reason')}", ""]
            continue
        lines += [header, rule]
        rows = [("0 (unedited)", 0, summary["base"])] + [
            (str(r["round"]), r["forgotten"], r["metrics"]) for r in item["rounds"]
        ]
        rows.append(
            (f"one batch of {item['batch']['forgotten']}", item["batch"]["forgotten"], item["batch"]["metrics"])
        )
        for label, forgotten, metrics in rows:
            lines.append(
                f"| {label} | {forgotten} | " + " | ".join(_cell(metrics.get(k), f) for k, _, f in ROUND_METRICS) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def rounds_markdown(title: str, config: BenchConfig, run_info: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """``rounds.md``: the title, what the run did (model, hparams, data, seeds, rounds, the columns) and the tables."""
    table, ppl_tokens = summary["table_markdown"], summary.get("ppl_tokens_measured")
    return "\n".join(
        [
            f"# Sequential unlearning: {title}",
            "",
            f"- model: `{run_info['model']}`, hparams: `{config.hparams}`, data: `{config.data}`, seeds "
            f"{list(config.seeds)}",
            f"- {run_info['rounds']} rounds of n = {config.n} facts, each edited on the model left by the previous "
            "rounds "
            "(targets and keys from the edited model, C0 of the unedited model reused); `one batch` = all facts in one "
            "edit",
            "- Eff / Gen: token accuracy (%) of the true answers of every fact forgotten so far (lower = more "
            "forgotten); "
            "Spe: of those facts' neighbourhood prompts (higher = better kept); Eff this round: the round's own facts; "
            + (
                f"PPL on the first {ppl_tokens or config.ppl_tokens} tokens of {run_info['ppl_text']}"
                if config.ppl_tokens
                else "no PPL"
            ),
            "",
            table,
        ]
    )


def plot_rounds(summary: Mapping[str, Any], path: Path) -> Optional[Path]:
    """Eff, Spe and PPL against facts forgotten, one line per method (dashed marker: one batch); ``None``
    without matplotlib."""
    plt = pyplot('the rounds plot')
    if plt is None:
        return None
    panels = [(k, h) for k, h, _ in ROUND_METRICS if k in ("eff", "spe", "ppl") and k in summary["base"]]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6))
    axes = list(axes) if len(panels) > 1 else [axes]
    for ax, (key, header) in zip(axes, panels):
        for name, item in summary["methods"].items():
            if not item["rounds"]:
                continue
            xs = [0] + [r["forgotten"] for r in item["rounds"]]
            ys = [summary["base"][key]["mean"]] + [
                r["metrics"].get(key, {}).get("mean", float("nan")) for r in item["rounds"]
            ]
            (line,) = ax.plot(xs, ys, marker="o", label=name)
            batch = item["batch"]["metrics"].get(key)
            if batch:
                ax.plot([item["batch"]["forgotten"]], [batch["mean"]], marker="*", markersize=12, linestyle="none",
                        color=line.get_color(), label=f"{name}, one batch")
        ax.set_xlabel("facts forgotten")
        ax.set_title(header)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
