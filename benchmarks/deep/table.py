"""Print recovered % per method and probe from audit seed files (mean over the seeds given).

    python benchmarks/deep/table.py benchmarks/results/deep/tune_n10/audit_seed_1[123].json
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def main(paths) -> None:
    table = defaultdict(lambda: defaultdict(list))
    probes = []
    for path in paths:
        record = json.load(open(path))
        for method, entry in record["methods"].items():
            for probe, result in (entry.get("probes") or {}).items():
                if isinstance(result, dict) and "recovered" in result:
                    table[method][probe].append(result["recovered"])
                    if probe not in probes:
                        probes.append(probe)
    print("| method | seeds | " + " | ".join(probes) + " |")
    print("|---|---|" + "---|" * len(probes))
    for method, row in table.items():
        seeds = max(len(v) for v in row.values())
        cells = [f"{statistics.mean(row[p]):.0f}" if row.get(p) else "" for p in probes]
        print(f"| {method} | {seeds} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
