"""The floor table: per probe, the facts an audit's row "recovers", with a Wilson 95% interval.

Run on the audit of never-known facts (``benchmarks/deep/never_known.py`` then ``audit_variants.py --cases``), the
``base`` row is what each attack finds on facts the model never knew: the reference a forgotten fact is read
against. Prints one markdown row per probe: ``recovered / n``, the %, and the interval (binomial, Wilson score).

    PYTHONPATH=. python benchmarks/audit/floor_table.py benchmarks/results/audit/never_known/audit_seed1_n40
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Tuple


def wilson(k: int, n: int, z: float = 1.96) -> Tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials, in % (``(0, 100)`` for ``n = 0``)."""
    if n == 0:
        return 0.0, 100.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="the audit's output folder (audit_seed_K.json files)")
    ap.add_argument("--method", default="base")
    args = ap.parse_args()
    for path in sorted(Path(args.out).glob("audit_seed_*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        print(f"## {path}: {args.method}, {len(record['case_ids'])} facts\n")
        print("| probe | recovered / n | % | Wilson 95% |\n|---|---|---|---|")
        for probe, result in record["methods"][args.method]["probes"].items():
            k, n = sum(result["items"]), len(result["items"])
            low, high = wilson(k, n)
            print(f"| {probe} | {k} / {n} | {100.0 * k / n:.0f} | {low:.0f}-{high:.0f} |")
        print()


if __name__ == "__main__":
    main()
