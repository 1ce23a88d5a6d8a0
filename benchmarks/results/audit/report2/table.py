"""The robust YAML on the second known set against its REPORT-half row, the paper YAML on the second set, the
never-known floor and the goals: one markdown table (recovered % of the facts, count in brackets), from the JSON.

    python benchmarks/results/audit/report2/table.py > benchmarks/results/audit/report2/table.md

Below the table: the robust YAML's second-set counts against its REPORT-half counts, per probe, two-sided Fisher.
"""
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "audit"))
from floor_fisher import DEFAULT_FLOOR, fisher_two_sided, pooled, row_items  # noqa: E402

A = "benchmarks/results/audit"
O = f"{A}/report2"
ROWS: List[Tuple[str, str, List[str]]] = [
    ("prompt / paraphrase / question / chat", "<= 10", ["prompt", "paraphrase", "question", "chat"]),
    ("3-shot in-context", "<= 10", ["ic3"]),
    ("multiple choice (chance 25)", "<= 35", ["mc"]),
    ("logit lens prompt / paraphrase / 3-shot", "<= 10", ["lens:prompt", "lens:paraphrase", "lens:ic3"]),
    ("int4 per channel prompt / paraphrase / 3-shot", "<= 5", ["int4:prompt", "int4:paraphrase", "int4:ic3"]),
    ("int4 groups of 16 prompt / paraphrase / 3-shot", "<= 5", ["int4g16:prompt", "int4g16:paraphrase", "int4g16:ic3"]),
    ("int8 per channel prompt / paraphrase / 3-shot", "", ["int8:prompt", "int8:paraphrase", "int8:ic3"]),
    ("relearning on related facts mlp / full", "<= 25", ["relearn-mlp", "relearn-full"]),
    ("generic-text control mlp / full", "", ["generic-mlp", "generic-full"]),
    ("RTT split mlp / full (of 20)", "<= 25", ["rtt-mlp", "rtt-full"]),
]


def load(name: str, files: List[str]) -> Dict[str, Tuple[int, int]]:
    """``{probe: (recovered, n)}`` of row ``name`` over the files that exist."""
    found = [f for f in files if Path(f).is_file()]
    if not found:
        return {}
    return {p: (sum(bool(v) for v in items), len(items)) for p, items in row_items(name, ",".join(found)).items()}


def cell(row: Dict[str, Tuple[int, int]], probes: List[str]) -> str:
    parts: List[Optional[str]] = []
    for p in probes:
        parts.append(None if p not in row else f"{round(100 * row[p][0] / row[p][1])} ({row[p][0]})")
    return "not run" if all(x is None for x in parts) else " / ".join(x or "-" for x in parts)


def main() -> None:
    columns = [
        ("robust, REPORT half (rm-qk)", load("rm-qk", [f"{A}/qkeys_report_n40_probes/audit_seed_1.json",
                                                        f"{A}/qkeys_report_n40_relearn/audit_seed_1.json"])),
        ("paper, REPORT half", load("ZeroUnlearn-GD", [f"{A}/ship_report_n40/audit_seed_1.json",
                                                        f"{A}/lever_report_n40_relearn/audit_seed_1.json",
                                                        f"{A}/rtt_report_n40/audit_seed_1.json"])),
        ("robust, second set", load("robust", [f"{O}/robust_probes/audit_seed_1.json",
                                                f"{O}/robust_relearn/audit_seed_1.json"])),
        ("paper, second set", load("ZeroUnlearn-GD", [f"{O}/paper_probes/audit_seed_1.json",
                                                       f"{O}/paper_rtt/audit_seed_1.json"])),
        ("never-known floor (n = 80)", pooled(DEFAULT_FLOOR)),
    ]
    print("| attack | " + " | ".join(c for c, _ in columns) + " | goal |")
    print("|---" * (len(columns) + 2) + "|")
    for label, goal, probes in ROWS:
        print(f"| {label} | " + " | ".join(cell(row, probes) for _, row in columns) + f" | {goal} |")
    print()
    print("Robust, second set against robust, REPORT half (two-sided Fisher on recovered facts):")
    old, new = columns[0][1], columns[2][1]
    for probe in [p for _, _, probes in ROWS for p in probes if p in old and p in new]:
        (k1, n1), (k2, n2) = old[probe], new[probe]
        print(f"- {probe}: {k1}/{n1} -> {k2}/{n2}, p = {fisher_two_sided(k1, n1 - k1, k2, n2 - k2):.2g}")


if __name__ == "__main__":
    main()
