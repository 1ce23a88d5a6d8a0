"""Issue 48: a retain set for Gemma-3-270m's --many edit, drawn from the CounterFact train file: 500 forget prompts
(with their subjects) of train records that are not among the TUNE cases (train, seed 1, n = 300: 12.18's draw) and
whose prompt is no neighbourhood (locality) prompt of the train or val file and no val prompt, and contains its subject,
so no scored prompt is retained as a string (subjects are not checked: 4 retain prompts share a subject with 5 val
forget case of the report draw, RESULTS 12.21).

Run from the repository root: python benchmarks/results/gemma/retain_set/make_retain.py
"""
from __future__ import annotations

import json
import random
from pathlib import Path

DATA = Path("../shared/data/counterfact")
HERE = Path(__file__).resolve().parent
TUNE_ROW = Path("benchmarks/results/gemma/rank_step/train/seed_1/rank_step_gemma-many-tw100-rank0_n300.json")
SIZE, SEED = 500, 7


def main() -> None:
    train = json.loads((DATA / "counterfact_easyedit_train_9484.json").read_text(encoding="utf-8"))
    val = json.loads((DATA / "counterfact_easyedit_val_1919.json").read_text(encoding="utf-8"))
    tune_ids = {str(i) for i in json.loads(TUNE_ROW.read_text(encoding="utf-8"))["case_ids"]}
    scored = {r["locality_prompt"] for r in train + val} | {r["prompt"] for r in val}
    pool = [r for r in train if str(r["case_id"]) not in tune_ids and r["prompt"] not in scored
            and r["subject"] in r["prompt"]]
    seen, chosen = set(), []
    for r in random.Random(SEED).sample(pool, len(pool)):
        if r["prompt"] in seen:
            continue
        seen.add(r["prompt"])
        chosen.append({"prompt": r["prompt"], "subject": r["subject"], "case_id": r["case_id"]})
        if len(chosen) == SIZE:
            break
    (HERE / "retain_train500.json").write_text(json.dumps(chosen, indent=1) + "\n", encoding="utf-8")
    print(f"{len(chosen)} retain prompts of {len(pool)} eligible")


if __name__ == "__main__":
    main()
