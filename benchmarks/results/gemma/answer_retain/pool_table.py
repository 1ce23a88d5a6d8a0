"""Per-seed and pooled goals of Gemma's --many rows at val n = 1,000 (RESULTS 12.30).

Usage: python benchmarks/results/gemma/answer_retain/pool_table.py LABEL=ROW_JSON[,ROW_JSON...] ...
One table line per row (seed), then one pooled line per label: known facts keeping their first token (summed over
the seeds: ``eff_first_known`` is their share of the known facts), Spe as the sum of the seeds' Spe after over the
sum before (every seed has n = 1,000, so this is the ratio of the means), PPL changes averaged, and the seeds missing
each goal (first-token Eff <= 2.0, Spe >= 75% of base, PPL <= +3%).
"""
from __future__ import annotations

import json
import sys
from typing import Dict, List


def _facts_keeping(row: Dict) -> int:
    """Known facts whose first answer token survives the edit (``eff_first_known`` is their percentage)."""
    return round(row["metrics"]["eff_first_known"] * row["metrics"]["known_count"] / 100)


def _ppl_change(row: Dict) -> float:
    return 100 * (row["metrics"]["ppl"] / row["base"]["ppl"] - 1)


def main(args: List[str]) -> None:
    print("| setting | seed | known | known keeping the first token | known Eff 1st token | Spe (% of base) | PPL |")
    print("|---|---|---|---|---|---|---|")
    pooled = []
    for arg in args:
        label, paths = arg.split("=", 1)
        rows = [json.load(open(p, encoding="utf-8")) for p in paths.split(",")]
        for r in rows:
            m, b = r["metrics"], r["base"]
            print(f"| {label} | {r['seed']} | {m['known_count']} | {_facts_keeping(r)} | {m['eff_first_known']:.1f} | "
                  f"{b['spe']:.1f} -> {m['spe']:.1f} ({100 * m['spe'] / b['spe']:.0f}%) | {_ppl_change(r):+.1f}% |")
        pooled.append((label, rows))
    print()
    print("| setting | seeds | known | keeping the first token | Spe, pooled | PPL, mean (max) | seeds missing "
          "Eff / Spe / PPL |")
    print("|---|---|---|---|---|---|---|")
    for label, rows in pooled:
        known = sum(r["metrics"]["known_count"] for r in rows)
        keeping = sum(_facts_keeping(r) for r in rows)
        spe = 100 * sum(r["metrics"]["spe"] for r in rows) / sum(r["base"]["spe"] for r in rows)
        ppl = [_ppl_change(r) for r in rows]
        miss_eff = [r["seed"] for r in rows if r["metrics"]["eff_first_known"] > 2.0]
        miss_spe = [r["seed"] for r in rows if r["metrics"]["spe"] < 0.75 * r["base"]["spe"]]
        miss_ppl = [r["seed"] for r in rows if _ppl_change(r) > 3.0]
        seeds = ", ".join(str(r["seed"]) for r in rows)
        print(f"| {label} | {seeds} | {known} | {keeping} ({100 * keeping / known:.1f}%) | {spe:.0f}% | "
              f"{sum(ppl) / len(ppl):+.1f}% ({max(ppl):+.1f}%) | {_seeds(miss_eff)} / {_seeds(miss_spe)} / "
              f"{_seeds(miss_ppl)} |")


def _seeds(seeds: List[int]) -> str:
    return ", ".join(map(str, seeds)) if seeds else "none"


if __name__ == "__main__":
    main(sys.argv[1:])
