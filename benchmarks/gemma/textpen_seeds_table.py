"""Issue 48, RESULTS 12.13: tables of the text-weighted null space over Gemma val seeds 1-3 (n = 50 each).

Seed 1 is read from the benches of 12.6 / 12.11 (``zerounlearn bench`` JSON), seeds 2 and 3 from
``layers_diag.py`` JSON with per-case rows. Every case has one neighbour prompt, so Spe is a count of neighbour
answers kept; pooled Spe is the sum of those counts over the sum of the unedited model's. Writes markdown to stdout.

    python benchmarks/gemma/textpen_seeds_table.py benchmarks/results/gemma/textpen_seeds/report_val_seed2_n50.json \\
        benchmarks/results/gemma/textpen_seeds/report_val_seed3_n50.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

SEED1 = {
    "rules": "benchmarks/results/gemma/measure/bench_gemma_rules_c5x10_n50/seed_1.json",
    "tw10": "benchmarks/results/gemma/textpen/report_val_seed1_n50_tw10/seed_1.json",
    "thr10x_tw100": "benchmarks/results/gemma/textpen/report_val_seed1_n50_thr10x_tw100/seed_1.json",
}
LABELS = {"rules": "`gemma-rules.yaml` (w = 0)", "tw10": "w = 10", "thr10x_tw100": "threshold x10, w = 100"}


def seed1_rows() -> Dict[str, Dict]:
    """``{variant: {rows, ppl, base_ppl, base_rows, change}}`` of seed 1 from the bench JSON (rows as layers_diag)."""
    out = {}
    for name, path in SEED1.items():
        data = json.loads(Path(path).read_text())
        method, base = data["methods"]["ZeroUnlearn-GD"], data["methods"]["base"]

        def rows(phase: str) -> List[Dict]:
            return [dict(case_id=r["case_id"], answered=r[phase]["rewrite_acc"][0] >= 1.0,
                         neighbour_acc=list(r[phase]["locality"]["neighborhood_truth_acc"]))
                    for r in method["requests"]]
        out[name] = dict(rows=rows("post"), base_rows=rows("pre"), ppl=method["metrics"]["ppl"],
                         base_ppl=base["metrics"]["ppl"], agree=method["metrics"]["spe_agree"],
                         change=method["details"]["layer_change_norm"])
    return out


def diag_rows(path: str) -> Dict[str, Dict]:
    """The same shape from a ``layers_diag.py`` JSON."""
    data = json.loads(Path(path).read_text())
    return {name: dict(rows=v["per_case"], base_rows=data["per_case"], ppl=v["metrics"]["ppl"],
                       base_ppl=data["base"]["ppl"], agree=v["metrics"]["spe_agree"], change=v["layer_change_norm"],
                       text={k: layer["text_change"] for k, layer in v["layers"].items()})
            for name, v in data["variants"].items()}


def counts(rows: Sequence[Dict], base_rows: Sequence[Dict], keep: Optional[set] = None):
    """(answered, cases, neighbour answers after the edit, the unedited model's) over the cases in ``keep``."""
    pick = [i for i, r in enumerate(rows) if keep is None or r["case_id"] in keep]
    return (sum(rows[i]["answered"] for i in pick), len(pick), sum(sum(rows[i]["neighbour_acc"]) for i in pick),
            sum(sum(base_rows[i]["neighbour_acc"]) for i in pick))


def cell(answered: int, n: int, kept: float, base: float) -> str:
    """A table cell: ``answered of n | kept of base (kept / base %)``; ``-`` for the share when base is 0."""
    share = f"{100 * kept / base:.0f}%" if base else "-"
    return f"{answered} of {n} | {kept:g} of {base:g} ({share})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("diag", nargs="+", help="layers_diag.py JSON of seeds 2, 3, ...")
    args = ap.parse_args()
    seeds = {1: seed1_rows()}
    for path in args.diag:
        seeds[json.loads(Path(path).read_text())["seed"]] = diag_rows(path)
    seed1_ids = {r["case_id"] for r in seeds[1]["rules"]["rows"]}
    w = sys.stdout.write
    w("| seed | variant | answered | Spe: neighbour answers after / before (% of base) | Spe agree | PPL (change) "
      "| weight change 3 / 4 / 5 | text change 3 / 4 / 5 | cases not in seed 1: answered | their Spe |\n")
    w("|---|---|---|---|---|---|---|---|---|---|\n")
    pooled: Dict[str, List[int]] = {}
    for seed, variants in sorted(seeds.items()):
        for name, v in variants.items():
            a, n, k, b = counts(v["rows"], v["base_rows"])
            total = pooled.setdefault(name, [0, 0, 0, 0])
            for i, x in enumerate((a, n, k, b)):
                total[i] += x
            change = " / ".join(f"{v['change'][str(layer)]:.3f}" for layer in (3, 4, 5))
            text = " / ".join(f"{v['text'][str(layer)]:.3f}" for layer in (3, 4, 5)) if "text" in v else "-"
            split = "- | -"
            if seed != 1:
                sa, sn, sk, sb = counts(v["rows"], v["base_rows"], {r["case_id"] for r in v["rows"]} - seed1_ids)
                split = cell(sa, sn, sk, sb)
            w(f"| {seed} | {LABELS.get(name, name)} | {cell(a, n, k, b)} | {v['agree']:.0f} | "
              f"{v['ppl']:.2f} ({100 * (v['ppl'] / v['base_ppl'] - 1):+.1f}%) | {change} | {text} | {split} |\n")
    w("\n| pooled seeds | variant | answered | Spe: neighbour answers after / before (% of base) |\n")
    w("|---|---|---|---|\n")
    for name, (a, n, k, b) in pooled.items():
        w(f"| {', '.join(map(str, sorted(seeds)))} | {LABELS.get(name, name)} | {cell(a, n, k, b)} |\n")


if __name__ == "__main__":
    main()
