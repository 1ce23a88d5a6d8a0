"""Per fact: which forgotten facts int4 brings back, and through which weights (issue 45 item 1).

Reads ``diagnose_forgotten.py``'s ``OUT/diagnosis.json`` (``--parts int4``) and writes ``OUT/int4_recovered.md``:
for each edit row, the facts the quantized-everywhere copy answers, with their output margins (unquantized /
quantized), the reads that also answer them (only one edited weight quantized, all but one), and the edit's effect
over the quantization error on the fact's key per edited weight; then the medians of those ratios for the recovered
facts and the others. ``--audit FILE ROW PROBE`` (e.g. the audit's ``audit_seed_1.json rm-r8 int4:prompt``) adds
whether the audit's own per-fact items agree.

    python benchmarks/deep/int4_recovered.py benchmarks/results/audit/diagnosis_int4_report \\
        --audit benchmarks/results/audit/lever2_report_n40_retain_robust/audit_seed_1.json rm-r8 int4:prompt
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional


def _layer(name: str) -> str:
    return f"L{name.split('.')[2]}"


def row_lines(name: str, row: Dict[str, Any], case_ids: List[str], audit_items: Optional[List[int]]) -> List[str]:
    """The per-fact table and the ratio medians of one edit row."""
    reads, int4 = row["int4_reads"], row.get("int4", {})
    hit = reads["int4 everywhere"]["recovered"]
    weights = sorted(int4, key=lambda w: int(w.split(".")[2]))
    single = [label for label in reads if label.startswith(("int4 only in L", "int4 everywhere but L"))]
    lines = [f"## {name}: {sum(hit)} of {len(hit)} facts recovered on the quantized-everywhere copy", ""]
    if audit_items is not None:
        agree = sum(int(a) == h for a, h in zip(audit_items, hit))
        lines += [f"The audit's per-fact items agree on {agree} of {len(hit)} facts.", ""]
    lines += ["| fact | case id | margin unquantized | margin quantized | also recovered by | "
              + " | ".join(f"effect/error {_layer(w)}" for w in weights) + " |",
              "|---|---|---|---|---|" + "---|" * len(weights)]
    for i, case in enumerate(case_ids):
        if not hit[i]:
            continue
        also = [label.replace("int4 ", "") for label in single if reads[label]["recovered"][i]]
        ratios = " | ".join(f"{int4[w]['effect_over_error'][i]:.1f}" for w in weights)
        lines.append(f"| {i} | {case} | {reads['unquantized']['margins'][i]:.2f} | "
                     f"{reads['int4 everywhere']['margins'][i]:.2f} | {', '.join(also) or '-'} | {ratios} |")
    lines += ["", "Median effect/error per edited weight, recovered facts / the others:", "",
              "| weight | recovered | others |", "|---|---|---|"]
    for w in weights:
        per_key = int4[w]["effect_over_error"]
        groups = [[r for r, h in zip(per_key, hit) if h], [r for r, h in zip(per_key, hit) if not h]]
        lines.append(f"| {_layer(w)} | " + " | ".join(f"{statistics.median(g):.1f}" if g else "-" for g in groups)
                     + " |")
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="the diagnose_forgotten.py --out folder (holding diagnosis.json)")
    ap.add_argument("--audit", nargs=3, metavar=("FILE", "ROW", "PROBE"), default=None)
    args = ap.parse_args()
    out = Path(args.out)
    result = json.loads((out / "diagnosis.json").read_text())
    audit_items, audit_row = None, None
    if args.audit:
        record = json.loads(Path(args.audit[0]).read_text())
        if record["case_ids"] != result["run"]["case_ids"]:
            raise SystemExit(f"{args.audit[0]}: case ids differ from {out / 'diagnosis.json'}")
        audit_row = args.audit[1]
        audit_items = record["methods"][audit_row]["probes"][args.audit[2]]["items"]
    lines = [f"# int4 ({result['run'].get('scheme')}): the recovered facts, {result['run']['half']} half", ""]
    for name, row in result["rows"].items():
        if name == "base" or "int4_reads" not in row:
            continue
        lines += row_lines(name, row, result["run"]["case_ids"], audit_items if name == audit_row else None)
    (out / "int4_recovered.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
