"""Markdown tables and a figure for ``diagnose_forgotten.py``'s ``diagnosis.json``."""
from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any, Dict, List

from zerounlearn_editor.evaluation.audit.diagnosis import winning_from

LOG = logging.getLogger(__name__)
READS = ("before fine-tune", "fine-tuned", "undo in edited layers", "only in edited layers", "undo in edited weights",
         "only in edited weights")


def _mc_table(rows: Dict[str, Any], layers: List[int]) -> List[str]:
    head = " | ".join(f"lens win L{l}" for l in layers)
    lines = [f"| row | mc win % | first token wins % | wins carried by first / later | {head} | median first "
             "winning layer | median layer it wins from (to the output) | never wins | median margin (first + later) |",
             "|---|---|---|---|" + "---|" * len(layers) + "---|---|---|---|"]
    for name, row in rows.items():
        mc = row["mc"]
        per_layer = " | ".join(f"{mc['lens_win_pct_per_layer'][l]:.0f}" for l in layers)
        settled = [w for w in (winning_from(f["lens_ranks"]) for f in mc["facts"]) if w is not None]
        settled_text = f"{statistics.median(settled)} ({len(settled)} facts)" if settled else "-"
        lines.append(f"| {name} | {mc['win_pct']:.0f} | {mc['first_token_win_pct']:.0f} | {mc['carried_by_first']} / "
                     f"{mc['carried_by_later']} | {per_layer} | {mc['median_first_win_layer']} | {settled_text} | "
                     f"{mc['never_wins_in_lens']} / {mc['n']} | {mc['median_margin']:.2f} "
                     f"({mc['median_first_margin']:.2f} + {mc['median_rest_margin']:.2f}) |")
    return lines


def _relearn_table(rows: Dict[str, Any]) -> List[str]:
    lines = ["| row | " + " | ".join(READS) + " | mean dW/W edited layers / others |",
             "|---|" + "---|" * len(READS) + "---|"]
    for name, row in rows.items():
        rl = row["relearn"]
        reads = " | ".join(f"{rl['reads'][r]['recovered_pct']:.0f} ({rl['reads'][r]['mean_answer_logp']:.1f})"
                           for r in READS)
        lines.append(f"| {name} | {reads} | {rl['mean_relative_change_edited_layers']:.2e} / "
                     f"{rl['mean_relative_change_other_layers']:.2e} |")
    return lines


def _int4_table(rows: Dict[str, Any]) -> List[str]:
    lines = ["| row | weight | edit entries < half step % | median abs(dW) / step | median norm(dW k) | "
             "median norm((Q(W') - W') k) | median ratio | keys where the error is larger % |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        for weight, d in row.get("int4", {}).items():
            lines.append(f"| {name} | `{weight}` | {100 * d['frac_below_half_step']:.1f} | "
                         f"{d['median_edit_over_step']:.3f} | {d['median_edit_effect']:.3f} | "
                         f"{d['median_quant_error']:.3f} | {d['median_effect_over_error']:.2f} | "
                         f"{100 * d['frac_keys_effect_below_error']:.0f} |")
    return lines


def _int4_reads_table(rows: Dict[str, Any], scheme: str) -> List[str]:
    labels = next((list(r["int4_reads"]) for r in rows.values() if "int4_reads" in r), [])
    if not labels:
        return []
    lines = [f"Recovered % of the forgotten prompts on {scheme} copies (mean answer log-probability):", "",
             "| row | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for name, row in rows.items():
        reads = row.get("int4_reads", {})
        lines.append(f"| {name} | " + " | ".join(
            f"{reads[x]['recovered_pct']:.0f} ({reads[x]['mean_answer_logp']:.1f})" if x in reads else "-"
            for x in labels) + " |")
    return [*lines, ""]


def _spread(groups: List[List[float]]) -> str:
    return " / ".join(f"{statistics.median(g):.2f} [{min(g):.2f}, {max(g):.2f}]" if g else "-" for g in groups)


def _margin_table(rows: Dict[str, Any], scheme: str) -> List[str]:
    """Per row, the output margin (answer's first-token logit minus the best other token's) before and after
    quantizing, split by whether the fact is recovered on the quantized-everywhere copy."""
    lines = [f"Output margin (logit of the answer's first token minus the best other token's), median [min, max], "
             f"facts recovered on the {scheme} copy / the others:", "",
             "| row | facts recovered / not | unquantized: recovered / not | quantized everywhere: recovered / not | "
             "change (quantized - unquantized): recovered / not |",
             "|---|---|---|---|---|"]
    for name, row in rows.items():
        reads = row.get("int4_reads", {})
        if "unquantized" not in reads or "margins" not in reads["unquantized"]:
            continue
        hit = reads["int4 everywhere"]["recovered"]
        cells = []
        for label in ("unquantized", "int4 everywhere"):
            margins = reads[label]["margins"]
            groups = [[m for m, h in zip(margins, hit) if h], [m for m, h in zip(margins, hit) if not h]]
            cells.append(_spread(groups))
        change = [q - u for q, u in zip(reads["int4 everywhere"]["margins"], reads["unquantized"]["margins"])]
        cells.append(_spread([[c for c, h in zip(change, hit) if h], [c for c, h in zip(change, hit) if not h]]))
        lines.append(f"| {name} | {sum(hit)} / {len(hit) - sum(hit)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def diagnosis_markdown(result: Dict[str, Any]) -> str:
    """The tables (mc, relearning, int4; those of the parts run) of one diagnosis."""
    rows = result["rows"]
    run = result["run"]
    scheme = run.get("scheme", "int4g16")
    parts = run.get("parts", ["mc", "relearn", "int4"])
    out = [f"# Diagnosis: where the forgotten answer survives ({run['half']} half, n = {run['n']}, seed {run['seed']})",
           ""]
    if "mc" in parts:
        n_layers = len(next(iter(rows.values()))["mc"]["lens_win_pct_per_layer"])
        edited = result["edited_layers"]
        layers = sorted({edited[0] - 1, edited[-1], edited[-1] + 4, edited[-1] + 5, n_layers - 5, n_layers - 3,
                         n_layers - 1} & set(range(n_layers)))
        out += ["## Multiple choice: the true answer against its 3 distractors", "",
                "lens win LX: % of facts whose true answer's first token has the highest logit among the 4 options' "
                "first tokens after decoder layer X (logit lens); mc win: the full answer's summed log-probability "
                "(the audit's mc).", "", *_mc_table(rows, layers), ""]
    if "relearn" in parts:
        out += ["## Relearning: the audit's related-facts fine-tune (MLP scope, the settings' steps and learning rate)",
                "", "Recovered % of the forgotten prompts (mean answer log-probability); 'undo in X': the fine-tune's "
                "change reverted in X, 'only in X': kept only in X.", "", *_relearn_table(rows), ""]
    if "int4" in parts:
        what = "groups of 16" if scheme == "int4g16" else "per output channel"
        out += [f"## int4 ({what}): the edit against the quantization step", "", *_int4_reads_table(rows, scheme),
                *_margin_table(rows, scheme), *_int4_table(rows), ""]
    return "\n".join(out)


def diagnosis_plot(result: Dict[str, Any], path: Path) -> None:
    """Three panels: lens win % per layer; the fine-tune's relative change per layer (down_proj); the edit's effect
    over the int4 error per edited weight. Skipped (with a log line) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        LOG.warning("matplotlib not importable: no %s", path)
        return
    rows = result["rows"]
    if any("mc" not in row or "relearn" not in row for row in rows.values()):
        LOG.info("not every part was run: no %s", path)
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for name, row in rows.items():
        axes[0].plot(row["mc"]["lens_win_pct_per_layer"], label=name)
        rl = row["relearn"]
        for kind, style in (("down_proj", "-"), ("up_proj", ":")):
            axes[1].plot(rl["layers"], rl["relative_change_per_layer"][kind], style, label=f"{name} {kind}")
    for ax in axes[:2]:
        for layer in result["edited_layers"]:
            ax.axvline(layer, color="grey", lw=0.5)
    axes[0].set(xlabel="decoder layer", ylabel="% facts: true answer's first token wins",
                title="multiple choice through the logit lens")
    axes[1].set(xlabel="decoder layer", ylabel="||dW|| / ||W||", title="related-facts fine-tune (MLP)", yscale="log")
    labels, values = [], []
    for name, row in rows.items():
        for weight, d in row.get("int4", {}).items():
            labels.append(f"{name} L{weight.split('.')[2]}")
            values.append(d["median_effect_over_error"])
    axes[2].bar(range(len(values)), values)
    axes[2].axhline(1.0, color="red", lw=0.8)
    axes[2].set_xticks(range(len(values)), labels, rotation=45, ha="right")
    axes[2].set(ylabel="median ||dW k|| / ||(Q(W') - W') k||", title="edit vs int4 g16 error on the forgotten keys")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
