"""The ``rtt-*`` columns of an audit split by whether a held-out fact shares its answer with a trained one.

RTT's split fine-tunes on half of the forgotten facts (prompt + true answer) and reads the other half. Where a
held-out fact's answer is also a trained fact's answer (CounterFact repeats answers such as languages and
countries), the fine-tune teaches that answer itself, so recovery there is not only relearning. This prints, per
method and ``rtt-*`` probe, the recovered % over the held-out facts with a shared answer and over those without,
from an audit's seed files (the plan's ``rtt`` split, the probe's per-fact ``items``) and the dataset's answers.

    ZEROUNLEARN_DATA_DIR=../shared/data PYTHONPATH=. python benchmarks/audit/rtt_shared_answers.py \\
        benchmarks/results/audit/rtt_report_n40 --data counterfact-easyedit
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from zerounlearn_editor.data.datasets import load_cases


def split_rates(record: dict, answers: dict) -> dict:
    """``{method: {probe: {"shared": (recovered, of), "new": (recovered, of)}}}`` of one seed file."""
    split = record["plan"]["rtt"]
    trained = {answers[c].strip().lower() for c in split["trained"]}
    shared = [answers[c].strip().lower() in trained for c in split["held_out"]]
    out: dict = {}
    for method, entry in record["methods"].items():
        for probe, result in (entry.get("probes") or {}).items():
            if not probe.startswith("rtt-"):
                continue
            rows = out.setdefault(method, {}).setdefault(probe, {})
            for kind, wanted in (("shared", True), ("new", False)):
                flags = [f for f, s in zip(result["items"], shared) if s == wanted]
                rows[kind] = (sum(flags), len(flags))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="the audit's output folder (audit_seed_K.json files)")
    ap.add_argument("--data", default="counterfact-easyedit")
    args = ap.parse_args()
    answers = {c.case_id: c.request["ground_truth"] for c in load_cases(args.data)}
    for path in sorted(Path(args.out).glob("audit_seed_*.json")):
        rates = split_rates(json.loads(path.read_text(encoding="utf-8")), answers)
        print(f"## {path.name}: recovered / held-out facts (shared answer | new answer)")
        for method, probes in rates.items():
            cells = [f"{p} {r['shared'][0]}/{r['shared'][1]} | {r['new'][0]}/{r['new'][1]}" for p, r in probes.items()]
            print(f"{method}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
