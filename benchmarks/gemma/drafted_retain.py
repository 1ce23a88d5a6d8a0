"""Issue 48: the glue between a bench draw and `zerounlearn retain-set` for the Gemma n = 50 retain runs.

  python benchmarks/gemma/drafted_retain.py facts RUN KNOWN OUT
      the facts to forget of a layers_diag run (RUN: its JSON, for the case ids; KNOWN: the known-facts file it drew
      from) as a facts file `retain-set --facts` reads
  python benchmarks/gemma/drafted_retain.py wrap RUN KNOWN DRAFTED OUT
      the drafted retain file less the records that name a scored subject or prompt of the run (the bench's
      disjointness check; keeping them would score Spe on facts the edit was told to keep), as the JSON
      `layers_diag.py --retain-from` reads; prints how many were dropped
  python benchmarks/gemma/drafted_retain.py many-facts DATA SEED OUT
      the known cases (bench-scale's own test) of bench-scale batch's n = 1,000 draw for DATA (train|val) and SEED
      (``harness.scale_cases.sampled_cases``, as bench-scale draws) as a facts file
  python benchmarks/gemma/drafted_retain.py many-wrap DATA SEED DRAFTED OUT
      the drafted records less those naming a subject or prompt scored in that draw's 1,000 cases, as the JSON list
      a YAML's retain_file reads; prints how many were dropped
"""
from __future__ import annotations

import json
import sys
from typing import List

MANY_FILES = {
    "train": "../shared/data/counterfact/counterfact_easyedit_train_9484.json",
    "val": "../shared/data/counterfact/counterfact_easyedit_val_1919.json",
}
MANY_N = 1000


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


def _keep_disjoint(drafted: str, cases: list) -> List[dict]:
    """The drafted file's records as ``{"prompt", "subject"}`` requests that pass the bench's disjointness check
    against ``cases`` (how many did not is printed)."""
    from zerounlearn_editor.harness.bench_config import BenchConfigError
    from zerounlearn_editor.harness.retain_sets import check_retain_disjoint

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
    return kept


def wrap_drafted(run: str, known: str, drafted: str, out: str) -> None:
    """The drafted records that pass the bench's disjointness check against the run's cases, wrapped for
    ``--retain-from``."""
    from zerounlearn_editor.data.datasets import load_cases

    by_id = {str(c.case_id): c for c in load_cases("counterfact-easyedit", path=known)}
    cases = [by_id[i] for i in _case_ids(run)]
    kept = _keep_disjoint(drafted, cases)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"case_ids": [c.case_id for c in cases], "retain": kept}, handle, indent=1)


def _many_cases(data: str, seed: str) -> list:
    from zerounlearn_editor.data.datasets import load_cases
    from zerounlearn_editor.harness.scale_cases import sampled_cases

    cases, _ = sampled_cases(load_cases(MANY_FILES[data]), MANY_N, int(seed))
    return cases


def write_many_facts(data: str, seed: str, out: str) -> None:
    """The known cases of bench-scale's n = 1,000 draw as ``{"prompt", "subject", "answer"}`` facts."""
    from zerounlearn_editor.evaluation.selection import KNOWN_MIN_ACCURACY, select_known_cases
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("gemma3-270m")
    known = select_known_cases(model, tok, _many_cases(data, seed), None, min_accuracy=KNOWN_MIN_ACCURACY)
    facts = [{"prompt": c.request["prompt"], "subject": c.request["subject"], "answer": c.request["ground_truth"]}
             for c in known]
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(facts, indent=1) + "\n")
    print(f"{len(known)} known cases of {data} seed {seed}, n = {MANY_N} -> {out}")


def wrap_many(data: str, seed: str, drafted: str, out: str) -> None:
    """The drafted records that pass the disjointness check against the n = 1,000 draw, as a retain file."""
    kept = _keep_disjoint(drafted, _many_cases(data, seed))
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(kept, indent=1) + "\n")


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    commands = {"facts": write_facts, "wrap": wrap_drafted, "many-facts": write_many_facts, "many-wrap": wrap_many}
    commands[command](*arguments)
