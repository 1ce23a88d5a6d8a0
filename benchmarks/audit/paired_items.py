"""Per-probe paired comparison of two audited rows on the same facts (exact McNemar on the per-fact items).

Each side is ``NAME=FILE[,FILE...]``: the row ``NAME`` of one or more ``audit_seed_*.json`` files (later files add
probes); both sides must hold the same case ids. Prints, per probe both sides have, the facts recovered by each,
those recovered only after one of them, and the two-sided exact McNemar p-value.

    A=benchmarks/results/audit
    python benchmarks/audit/paired_items.py \\
        rm-r8=$A/lever2_report_n40_retain_robust/audit_seed_1.json,$A/lever2_report_n40_retain/audit_seed_1.json \\
        rm-qk=$A/qkeys_report_n40_probes/audit_seed_1.json
"""
from __future__ import annotations

import argparse
import json
from math import comb
from pathlib import Path
from typing import Dict, List, Tuple


def side(spec: str) -> Tuple[str, List[str], Dict[str, List[int]]]:
    """``NAME=FILE[,FILE...]`` -> (name, case ids, {probe: per-fact items})."""
    name, files = spec.split("=", 1)
    probes: Dict[str, List[int]] = {}
    cases: List[str] = []
    for path in files.split(","):
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if cases and data["case_ids"] != cases:
            raise SystemExit(f"{path}: other case ids than {files.split(',')[0]}")
        cases = data["case_ids"]
        probes.update({key: value["items"] for key, value in data["methods"][name]["probes"].items()})
    return name, cases, probes


def mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant facts."""
    n = b + c
    if not n:
        return 1.0
    return min(1.0, 2 * sum(comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first")
    ap.add_argument("second")
    args = ap.parse_args()
    (a, cases_a, pa), (b, cases_b, pb) = side(args.first), side(args.second)
    if cases_a != cases_b:
        raise SystemExit("the two sides audit other facts")
    for probe in (key for key in pb if key in pa):
        x, y = [bool(v) for v in pa[probe]], [bool(v) for v in pb[probe]]
        only_a = sum(i and not j for i, j in zip(x, y))
        only_b = sum(j and not i for i, j in zip(x, y))
        print(f"{probe}: {a} {sum(x)}/{len(x)}, {b} {sum(y)}/{len(y)}; back only after {a} {only_a}, only after "
              f"{b} {only_b}; exact McNemar p = {mcnemar(only_a, only_b):.3g}")


if __name__ == "__main__":
    main()
