"""One audited row against the never-known floor: per probe, Fisher's exact test (two-sided) on recovered facts.

The floor is the ``base`` row of the never-known audits (RESULTS §7, "The never-known reference"), pooled over its
draws: each ``--floor`` argument is one draw, ``FILE[,FILE...]`` of ``audit_seed_*.json`` files (a later file of a
draw adds only the probes the earlier ones lack, so a draw's formats are not counted twice). The row is
``NAME=FILE[,FILE...]`` likewise. Prints, per probe both have, the row's and the floor's recovered counts, whether
the row is above / at / below the floor's rate, and the p-value.

    A=benchmarks/results/audit
    python benchmarks/audit/floor_fisher.py rm-qk-kr06=$A/qkeys_kr06_report_n40_probes/audit_seed_1.json
"""
from __future__ import annotations

import argparse
import json
from math import comb
from pathlib import Path
from typing import Dict, List, Tuple

NK = "benchmarks/results/audit/never_known"
DEFAULT_FLOOR = [f"{NK}/audit_seed1_n40/audit_seed_1.json",
                 f"{NK}/audit_draw2_n40/audit_seed_1.json,{NK}/audit_draw2_relearn_n40/audit_seed_1.json"]


def row_items(name: str, files: str) -> Dict[str, List[int]]:
    """``{probe: per-fact items}`` of row ``name`` over the comma-separated seed ``files`` (first file wins)."""
    probes: Dict[str, List[int]] = {}
    for path in files.split(","):
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for key, value in data["methods"][name]["probes"].items():
            probes.setdefault(key, value["items"])
    return probes


def pooled(draws: List[str], name: str = "base") -> Dict[str, Tuple[int, int]]:
    """``{probe: (recovered, n)}`` summed over the draws (only probes every draw has)."""
    per_draw = [row_items(name, files) for files in draws]
    common = set.intersection(*(set(d) for d in per_draw))
    return {p: (sum(sum(bool(v) for v in d[p]) for d in per_draw), sum(len(d[p]) for d in per_draw))
            for p in common}


def fisher_two_sided(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact p of the 2 x 2 table ``[[a, b], [c, d]]`` (sum of the tables with the same margins
    no more likely than the observed one)."""
    row1, col1, n = a + b, a + c, a + b + c + d

    def prob(x: int) -> float:
        return comb(col1, x) * comb(n - col1, row1 - x) / comb(n, row1)

    observed = prob(a)
    lo, hi = max(0, row1 + col1 - n), min(row1, col1)
    return min(1.0, sum(p for p in (prob(x) for x in range(lo, hi + 1)) if p <= observed * (1 + 1e-7)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row", help="NAME=FILE[,FILE...]")
    ap.add_argument("--floor", action="append", default=None, metavar="FILE[,FILE...]",
                    help="one never-known draw (repeat per draw); default: the two §7 draws")
    args = ap.parse_args()
    name, files = args.row.split("=", 1)
    floor = pooled(args.floor or DEFAULT_FLOOR)
    for probe, items in row_items(name, files).items():
        if probe not in floor:
            continue
        k, n = sum(bool(v) for v in items), len(items)
        fk, fn = floor[probe]
        side = "above" if k * fn > fk * n else ("below" if k * fn < fk * n else "at")
        p = fisher_two_sided(k, n - k, fk, fn - fk)
        print(f"{probe}: {name} {k}/{n} ({100 * k / n:.0f}%), floor {fk}/{fn} ({100 * fk / fn:.0f}%): {side}, "
              f"Fisher p = {p:.3g}")


if __name__ == "__main__":
    main()
