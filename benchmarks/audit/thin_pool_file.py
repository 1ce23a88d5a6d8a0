"""Write the thin-pool audit file of issue 36 item 7: 20 CounterFact capital facts in EasyEdit format, no relation id.

:data:`CASES`: 16 capital facts SmolLM2-135M-Instruct answers (teacher-forced accuracy 1.0, measured) and 4 it
does not, from the ROME-format file (``P36`` records, relation id dropped, converted to EasyEdit's ``prompt /
subject / ground_truth / target_new / rephrase_prompt / locality_prompt / locality_ground_truth``) and the two
EasyEdit-format files. With ``zerounlearn audit --data OUT --known-only --n 16`` all 16 known facts are forgotten
in one batch and every capital of the file is forbidden to the audit's borrowing, so the file itself leaves the
audit no capital to borrow (benchmarks/RESULTS.md, "Audit pool").

    python benchmarks/audit/thin_pool_file.py --data-dir ../shared/data --out results/capitals20.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

CASES = [("rome", 4385), ("rome", 4520), ("rome", 16989), ("val", 6964), ("val", 8020), ("val", 17331),
         ("train", 475), ("train", 1392), ("train", 2302), ("train", 3073), ("train", 3106), ("train", 8888),
         ("train", 9606), ("train", 10035), ("train", 10369), ("train", 11145),  # known to SmolLM2
         ("rome", 1124), ("rome", 1298), ("rome", 4154), ("rome", 5191)]  # not known
FILES = {"rome": "counterfact_rome_1129.json", "val": "counterfact_easyedit_val_1919.json",
         "train": "counterfact_easyedit_train_9484.json"}


def _easyedit(record: dict) -> dict:
    """A ROME-format record in EasyEdit format, without its relation id."""
    rw = record["requested_rewrite"]
    return {"case_id": record["case_id"], "prompt": rw["prompt"].format(rw["subject"]), "subject": rw["subject"],
            "ground_truth": rw["target_true"]["str"], "target_new": rw["target_new"]["str"],
            "rephrase_prompt": record["paraphrase_prompts"][0], "locality_prompt": record["neighborhood_prompts"][0],
            "locality_ground_truth": rw["target_true"]["str"]}


def build(data_dir: Path) -> list:
    by_file = {key: {r["case_id"]: r for r in json.loads((data_dir / "counterfact" / name).read_text(encoding="utf-8"))}
               for key, name in FILES.items()}
    records = []
    for source, case_id in CASES:
        record = by_file[source][case_id]
        record = _easyedit(record) if source == "rome" else dict(record)
        records.append(dict(record, case_id=f"{source}-{case_id}"))
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    records = build(args.data_dir)
    assert len(records) == 20 and not any("relation_id" in r for r in records)
    args.out.write_text(json.dumps(records, indent=1), encoding="utf-8")
    print(f"{len(records)} records -> {args.out}")


if __name__ == "__main__":
    main()
