"""Tabulate the guard readings (``guard_readings.py`` JSONs) against the 5000-token perplexity change.

    python benchmarks/guard/guard_table.py NAME=benchmarks/results/.../guard_readings.json ... > table.md

Per model and condition: the change of the 5000-token perplexity, each candidate guard text's reading (percent),
then per candidate the mean absolute difference from the 5000-token change over every condition, the largest
shortfall, and the tokens it reads (its cost: one forward pass over them before and one after an edit).
"""
from __future__ import annotations

import json
import sys
from typing import Dict, List, Tuple


def _pct(after: float, before: float) -> float:
    return 100.0 * (after / before - 1.0)


def rows_of(name: str, path: str) -> Tuple[List[str], List[Tuple[str, float, Dict[str, float]]]]:
    data = json.load(open(path))
    base = data["base"]
    names = list(base["guards"])
    rows = []
    for label, cond in data["conditions"].items():
        readings = {g: _pct(cond["guards"][g], base["guards"][g]) for g in names}
        rows.append((f"{name}, {label}", _pct(cond["ppl_5000"], base["ppl_5000"]), readings))
    return names, rows


def tokens_of(candidate: str) -> int:
    if candidate.startswith("first_"):
        return int(candidate.split("_")[1].split(" ")[0])
    k, w = candidate.split("_")[0].split("x")
    return int(k) * int(w)


def main() -> None:
    names: List[str] = []
    rows: List[Tuple[str, float, Dict[str, float]]] = []
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        these, more = rows_of(name, path)
        names = names or these
        rows += more
    print("| edit | 5000-token PPL | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for label, ppl, readings in rows:
        print(f"| {label} | {ppl:+.1f}% | " + " | ".join(f"{readings[g]:+.1f}" for g in names) + " |")
    errors = {g: [r[g] - ppl for _, ppl, r in rows] for g in names}
    mean_abs = [f"{sum(map(abs, e)) / len(e):.1f}" for e in errors.values()]
    print("| mean abs difference (points) | - | " + " | ".join(mean_abs) + " |")
    print("| largest shortfall (points) | - | " + " | ".join(f"{min(e):+.1f}" for e in errors.values()) + " |")
    print("| tokens read (cost) | 5000 | " + " | ".join(str(tokens_of(g)) for g in names) + " |")


if __name__ == "__main__":
    main()
