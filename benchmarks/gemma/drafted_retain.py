"""Issue 48: the glue between a bench draw and `zerounlearn retain-set` for the Gemma n = 50 retain runs.

  python benchmarks/gemma/drafted_retain.py facts RUN KNOWN OUT
      the facts to forget of a layers_diag run (RUN: its JSON, for the case ids; KNOWN: the known-facts file it drew
      from) as a facts file `retain-set --facts` reads
  python benchmarks/gemma/drafted_retain.py wrap RUN KNOWN DRAFTED OUT
      the drafted retain file less the records that name a scored subject or prompt of the run (the bench's
      disjointness check; keeping them would score Spe on facts the edit was told to keep), as the JSON
      `layers_diag.py --retain-from` reads; prints how many were dropped
"""
from __future__ import annotations

import json
import sys
from typing import List


def _case_ids(run: str) -> List[str]:
    with open(run, encoding="utf-8") as handle:
        return [str(i) for i in json.load(handle)["case_ids"]]


def write_facts(run: str, known: str, out: str) -> None:
    """The run's cases as ``{"prompt", "subject", "answer"}`` records (answer: the known file's ground truth)."""
    with open(known, encoding="utf-8") as handle:
        records = {str(r["case_id"]): r for r in json.load(handle)}
    facts = [{"prompt": records[i]["prompt"], "subject": records[i]["subject"], "answer": records[i]["ground_truth"]}
             for i in _case_ids(run)]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(facts, handle, indent=1)


def wrap_drafted(run: str, known: str, drafted: str, out: str) -> None:
    """The drafted records that pass the bench's disjointness check against the run's cases, wrapped for
    ``--retain-from``."""
    from zerounlearn_editor.data.datasets import load_cases
    from zerounlearn_editor.harness.bench_config import BenchConfigError
    from zerounlearn_editor.harness.retain_sets import check_retain_disjoint

    by_id = {str(c.case_id): c for c in load_cases("counterfact-easyedit", path=known)}
    cases = [by_id[i] for i in _case_ids(run)]
    kept, dropped = [], 0
    with open(drafted, encoding="utf-8") as handle:
        records = json.load(handle)
    for record in records:
        request = {"prompt": record["prompt"], "subject": record["subject"]}
        try:
            check_retain_disjoint([request], cases)
            kept.append(request)
        except BenchConfigError:
            dropped += 1
    print(f"drafted retain set: {len(kept) + dropped} records, {dropped} dropped for naming a scored subject or prompt")
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"case_ids": [c.case_id for c in cases], "retain": kept}, handle, indent=1)


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    {"facts": write_facts, "wrap": wrap_drafted}[command](*arguments)
