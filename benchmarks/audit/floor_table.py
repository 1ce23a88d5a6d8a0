"""The floor table: per probe, the facts an audit's row "recovers", with a Wilson 95% interval.

Run on the audit of never-known facts (``benchmarks/deep/never_known.py`` then ``audit_variants.py --cases``), the
``base`` row is what each attack finds on facts the model never knew: the reference a forgotten fact is read
against. Prints one markdown row per probe: ``recovered / n``, the %, and the interval (binomial, Wilson score);
with ``--ranks FILE`` (``benchmarks/audit/final_ranks.py``) also the count over the facts whose answer is near the
unedited output (final rank < ``--near``) and over the others.

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
    ap.add_argument("--ranks", default=None, help="final_ranks.py's JSON: split the facts by the answer's rank")
    ap.add_argument("--near", type=int, default=10)
    args = ap.parse_args()
    ranks = json.loads(Path(args.ranks).read_text(encoding="utf-8")) if args.ranks else None
    for path in sorted(Path(args.out).glob("audit_seed_*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        print(f"## {path}: {args.method}, {len(record['case_ids'])} facts\n")
        split = "" if ranks is None else f" near (rank < {args.near}) | far |"
        print(f"| probe | recovered / n | % | Wilson 95% |{split}\n|---|---|---|---|" + "---|" * (2 * bool(ranks)))
        for probe, result in record["methods"][args.method]["probes"].items():
            k, n = sum(result["items"]), len(result["items"])
            low, high = wilson(k, n)
            row = f"| {probe} | {k} / {n} | {100.0 * k / n:.0f} | {low:.0f}-{high:.0f} |"
            if ranks is not None:
                ids = result.get("held_out", record["case_ids"])
                near = [ranks[i]["final_rank"] < args.near for i in ids]
                for wanted in (True, False):
                    flags = [f for f, s in zip(result["items"], near) if s == wanted]
                    row += f" {sum(flags)} / {len(flags)} |"
            print(row)
        print()


if __name__ == "__main__":
    main()
