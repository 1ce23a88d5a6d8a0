"""Issue 48 lever (RESULTS 12.29): a same-answer retain set for Gemma-3-270m's --many edit at n = 1,000.

12.20-12.25 found the --many edit's Spe lost in the neighbours of the *known* facts (same relation, same true
answer), and 12.21's 500 random train prompts shielded them on TUNE but by a fifth as much on REPORT. Here the
retain set is aimed at those neighbours: for every case of a stored bench-scale row that the unedited model knows
(forget-prompt token accuracy >= 0.5, bench-scale's own test), up to K records of the CounterFact *train* file with
the same true answer (the bench's `same-answer` policy, `harness.retain_sets`), drawn so that no retain record is a
sampled case, shares a sampled subject, or has its subject inside any scored prompt of the row's 1,000 cases
(forget, paraphrase, neighbourhood), checked again by `check_retain_disjoint`. Known cases are served first, so
the unknown cases (drawn after them only to keep the leak test over every scored case) take nothing from them.

Usage (repository root): python benchmarks/results/gemma/answer_retain/make_retain.py ROW_JSON DATA OUT [--k 10]
  ROW_JSON: a stored row (its case_ids and known_count are read; a known_count of null, as seed_cases.py writes
  for a seed not run yet, skips the check); DATA: train or val (the row's file).
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.evaluation.selection import KNOWN_MIN_ACCURACY, select_known_cases
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint, same_answer_retain_groups
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

FILES = {
    "train": "../shared/data/counterfact/counterfact_easyedit_train_9484.json",
    "val": "../shared/data/counterfact/counterfact_easyedit_val_1919.json",
}
SEED = 7


def _answer(case) -> str:
    return str(case.request.get("ground_truth") or "").strip().casefold()


def row_cases(row: dict, data: str) -> list:
    """The cases of a stored (or stub) row, in its ``case_ids`` order, from the ``FILES[data]`` file."""
    by_id = {str(c.case_id): c for c in load_cases(FILES[data])}
    return [by_id[str(i)] for i in row["case_ids"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row")
    parser.add_argument("data", choices=sorted(FILES))
    parser.add_argument("out")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--model", default="gemma3-270m")
    args = parser.parse_args()
    row = json.loads(Path(args.row).read_text(encoding="utf-8"))
    cases = row_cases(row, args.data)
    model, tok = load_model_and_tokenizer(args.model)
    known = select_known_cases(model, tok, cases, None, min_accuracy=KNOWN_MIN_ACCURACY)
    if row["base"]["known_count"] is not None and len(known) != row["base"]["known_count"]:
        raise SystemExit(f"{len(known)} known cases, the row says {row['base']['known_count']}")
    known_ids = {c.case_id for c in known}
    ordered = known + [c for c in cases if c.case_id not in known_ids]
    pool = load_cases(FILES["train"])
    groups = same_answer_retain_groups(ordered, pool, args.k, SEED)[: len(known)]
    chosen = [{"prompt": r.request["prompt"], "subject": r.request["subject"], "case_id": r.case_id}
              for group in groups for r in group]
    check_retain_disjoint([{"prompt": c["prompt"], "subject": c["subject"]} for c in chosen], cases)
    same = sum(1 for case, group in zip(known, groups) for r in group if _answer(r) == _answer(case))
    Path(args.out).write_text(json.dumps(chosen, indent=1) + "\n", encoding="utf-8")
    logging.getLogger(__name__).warning("%d known cases, %d retain records (%d share the answer) -> %s",
                                        len(known), len(chosen), same, args.out)


if __name__ == "__main__":
    main()
