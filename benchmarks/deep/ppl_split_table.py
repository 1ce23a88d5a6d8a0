"""The tables of ``benchmarks/deep/ppl_split.py``'s JSON files (``layers.json``, ``subsets_*.json``,
``scale.json`` in one folder), as markdown on stdout.

    python benchmarks/deep/ppl_split_table.py benchmarks/results/audit/robust_ppl_split > .../tables.md
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List


def pct(ppl: float, base: float) -> str:
    """``ppl`` and its change against ``base`` in percent."""
    return f"{ppl:.2f} ({100 * (ppl / base - 1):+.2f}%)"


def layers_table(data: Dict[str, Any]) -> List[str]:
    """Per layer: |dW|/|W|, the text share, PPL with the layer alone and with it left out."""
    base, cond = data["base_ppl"], data["conditions"]
    lines = [f"Base PPL {base:.4f}; full edit {pct(cond['full']['ppl'], base)} (the bench's function: "
             f"{data['full_ppl_bench']:.4f}); W + 0.5 dW: "
             + (pct(cond["half"]["ppl"], base) if "half" in cond else "-"), "",
             "| layer | \\|dW\\|/\\|W\\| | tr(dW C0 dW^T)/tr(W C0 W^T) | mean \\|z - h\\| read there "
             "| PPL, this layer's change alone | PPL, this layer left out | added NLL alone (nats) |",
             "|---|---|---|---|---|---|---|"]
    singles = 0.0
    for layer, row in data["layers"].items():
        only, without = cond[f"only_{layer}"], cond[f"without_{layer}"]
        singles += only["ppl"] / base - 1
        lines.append(f"| {layer} | {row['rel_change']:.3f} | {row['text_share']:.3f} | "
                     f"{statistics.mean(data['residual_norms'][layer]):.1f} | {pct(only['ppl'], base)} | "
                     f"{pct(without['ppl'], base)} | {only['added_nll']:.1f} |")
    lines += ["", f"Sum of the single layers' changes: {100 * singles:+.2f}%; full edit added NLL "
              f"{cond['full']['added_nll']:.1f} nats over {cond['full']['scored_tokens']} tokens.", ""]
    full = cond["full"]
    shares = full["share_of_added"]
    lines += [f"Full edit, added NLL: net {full['added_nll']:.1f}, positive part {full['added_nll_positive']:.1f}; "
              f"the top 1 / 5 / 10% of positions carry {100 * shares['top_1pct_of_positive']:.0f} / "
              f"{100 * shares['top_5pct_of_positive']:.0f} / {100 * shares['top_10pct_of_positive']:.0f}% of the "
              f"positive part; answer first tokens ({full['answer_token_positions']} positions) "
              f"{full['added_at_answer_tokens']:.2f} nats; per 512-token window: "
              + ", ".join(f"{v:.0f}" for v in full["per_window_added"]), "",
              "| token | before it | NLL base | NLL edit |", "|---|---|---|---|"]
    for row in full["top_positions"][:15]:
        before = row["before"].replace("\n", "\\n").replace("|", "\\|")
        token = row["token"].replace("\n", "\\n").replace("|", "\\|")
        lines.append(f"| `{token}` | {before} | {row['nll_base']:.2f} | {row['nll_edit']:.2f} |")
    return lines


def subsets_table(data: Dict[str, Any], base: float) -> List[str]:
    """Per fact group: facts, answers, PPL, |dW|/|W| per layer, added NLL."""
    lines = ["| group | facts | PPL | \\|dW\\|/\\|W\\| layers 12-18 | added NLL (nats) | top 10% of positions' share |",
             "|---|---|---|---|---|---|"]
    for label, group in data["groups"].items():
        norms = " / ".join(f"{v:.2f}" for v in group["details"]["layer_change_norm"].values())
        lines.append(f"| {label} | {len(group['case_ids'])} | {pct(group['ppl'], base)} | {norms} | "
                     f"{group['added_nll']:.1f} | {100 * group['share_of_added']['top_10pct_of_positive']:.0f}% |")
    return lines


def scale_table(data: Dict[str, Any], base: float) -> List[str]:
    """Per scale: PPL, Eff, Gen, Spe, facts answered; per layer left out: Eff, Spe, answered."""
    b = data["base_scores"]
    lines = [f"Unedited: Eff {b['eff']:.1f}, Gen {b['gen']:.1f}, Spe {b['spe']:.1f}", "",
             "| W + s dW, s | PPL | Eff | Gen | Spe | Spe agree | forget prompts answered |",
             "|---|---|---|---|---|---|---|"]
    for scale, row in data["scales"].items():
        lines.append(f"| {scale} | {pct(row['ppl'], base)} | {row['eff']:.1f} | {row['gen']:.1f} | {row['spe']:.1f} | "
                     f"{row['spe_agree']:.1f} | {len(row['answered'])} |")
    if data.get("without"):
        lines += ["", "| layer left out | Eff | Gen | Spe | forget prompts answered |", "|---|---|---|---|---|"]
        for layer, row in data["without"].items():
            lines.append(f"| {layer} | {row['eff']:.1f} | {row['gen']:.1f} | {row['spe']:.1f} | "
                         f"{len(row['answered'])} |")
    return lines


def main() -> None:
    folder = Path(sys.argv[1])
    layers = json.loads((folder / "layers.json").read_text())
    base = layers["base_ppl"]
    out = ["## By layer", ""] + layers_table(layers)
    for split in ("answer", "residual"):
        path = folder / f"subsets_{split}.json"
        if path.is_file():
            out += ["", f"## By fact: split {split}", ""] + subsets_table(json.loads(path.read_text()), base)
    if (folder / "scale.json").is_file():
        out += ["", "## By scale", ""] + scale_table(json.loads((folder / "scale.json").read_text()), base)
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
