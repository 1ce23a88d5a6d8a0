"""Compare bench rows (seed JSONs of `zerounlearn bench`) as counts with binomial intervals: SmolLM2 as unseen.

For each row (a bench folder and its row name): known facts still answered (first answer token still the
argmax, Eff 1st), the neighbour answers kept (Spe; one neighbour prompt per case), PPL change against the first
folder's base row, edit seconds; pooled over the seeds with Wilson 95% intervals, and Fisher's exact test of each
row against the first (the reference).

    python benchmarks/smollm2_unseen/tables.py --row shipped=benchmarks/results/smollm2_unseen/bench_shipped_n10 \
        --row unseen=benchmarks/results/smollm2_unseen/bench_unseen_n10 > table.md
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Dict, List, Tuple

from scipy.stats import fisher_exact


def wilson(k: int, n: int, z: float = 1.96) -> Tuple[float, float]:
    """95% Wilson interval of a binomial proportion k / n (as percentages)."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (100 * max(0.0, centre - half), 100 * min(1.0, centre + half))


def neighbour_counts(requests: List[dict]) -> Tuple[int, int]:
    """(kept, total) neighbour answers, token accuracy 1.0 counted as kept, over every neighbour prompt."""
    kept = total = 0
    for request in requests:
        for acc in request["post"]["locality"].get("neighborhood_truth_acc", []):
            kept += int(float(acc) >= 1.0)
            total += 1
    return kept, total


def row_stats(folder: Path) -> Dict[str, Dict[str, list]]:
    """Per row: lists over seeds of (answered, n), (spe kept, total), ppl, edit seconds."""
    out: Dict[str, Dict[str, list]] = {}
    for path in sorted(folder.glob("seed_*.json")):
        record = json.loads(path.read_text())
        for name, row in record["methods"].items():
            if row.get("status") != "ok":
                continue
            m = row["metrics"]
            n = len(row["requests"])
            stats = out.setdefault(name, {"seed": [], "answered": [], "spe": [], "spe_metric": [], "ppl": [],
                                           "edit": []})
            stats["spe_metric"].append(m["spe"])
            stats["seed"].append(record["seed"])
            stats["answered"].append((round(m["eff_first"] * n / 100), n))
            stats["spe"].append(neighbour_counts(row["requests"]) if name != "base" else
                                neighbour_counts([{"post": r["pre"]} for r in row["requests"]]))
            stats["ppl"].append(m.get("ppl"))
            stats["edit"].append(m.get("edit_seconds"))
    return out


def parse_row(spec: str) -> Tuple[str, Path, str]:
    """``LABEL=FOLDER[:ROW]`` -> (label, folder, row name; default ZeroUnlearn-GD)."""
    label, _, rest = spec.partition("=")
    folder, _, row = rest.partition(":")
    return label, Path(folder), row or "ZeroUnlearn-GD"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", action="append", required=True, metavar="LABEL=FOLDER[:ROW]",
                        help="a row; the first is the reference of the tests, its folder's base row the base")
    args = parser.parse_args()
    rows = [parse_row(spec) for spec in args.row]
    first = row_stats(rows[0][1])
    base, ref = first["base"], first[rows[0][2]]
    print("| row | seeds | answered per seed | answered pooled (95% CI) | Fisher p vs ref | "
          "Spe fully kept per seed | Spe (bench metric) per seed | Spe fully kept pooled (95% CI) | "
          "Fisher p vs ref | PPL change per seed | edit s per seed | edit s / ref per seed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for index, (label, folder, name) in enumerate([("base", rows[0][1], "base")] + rows):
        s = row_stats(folder)[name]
        if s["seed"] != base["seed"]:
            raise SystemExit(f"{folder}: seeds {s['seed']} differ from {base['seed']}")
        ak, an = sum(k for k, _ in s["answered"]), sum(n for _, n in s["answered"])
        sk, sn = sum(k for k, _ in s["spe"]), sum(n for _, n in s["spe"])
        lo, hi = wilson(ak, an)
        slo, shi = wilson(sk, sn)
        p_ans = p_spe = ratio = "-"
        if index > 1:  # not base, not the reference
            rk, rn = sum(k for k, _ in ref["answered"]), sum(n for _, n in ref["answered"])
            p_ans = f"{fisher_exact([[ak, an - ak], [rk, rn - rk]])[1]:.2f}"
            rsk, rsn = sum(k for k, _ in ref["spe"]), sum(n for _, n in ref["spe"])
            p_spe = f"{fisher_exact([[sk, sn - sk], [rsk, rsn - rsk]])[1]:.2f}"
            ratio = " / ".join(f"{e / r:.2f}" for e, r in zip(s["edit"], ref["edit"]) if e and r)
        if name == "base":
            ppl = " / ".join(f"{b:.2f}" for b in base["ppl"])
        else:
            ppl = " / ".join(f"{100 * (p / b - 1):+.1f}%" for p, b in zip(s["ppl"], base["ppl"]) if p and b)
        edit = " / ".join(f"{e:.0f}" for e in s["edit"] if e) or "-"
        print(f"| {label} | {','.join(map(str, s['seed']))} | "
              f"{' / '.join(str(k) for k, _ in s['answered'])} of {s['answered'][0][1]} | {ak} of {an} "
              f"({lo:.0f}-{hi:.0f}%) | {p_ans} | {' / '.join(str(k) for k, _ in s['spe'])} | "
              f"{' / '.join(f'{v:.1f}' for v in s['spe_metric'])} | {sk} of {sn} "
              f"({slo:.0f}-{shi:.0f}%) | {p_spe} | {ppl} | {edit} | {ratio} |")


if __name__ == "__main__":
    main()
