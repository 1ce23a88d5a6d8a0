"""Write the thin-pool audit file of issue 36 item 7: 20 CounterFact capital facts in EasyEdit format, no relation id.

The 10 ``P36`` (capital) records of ``counterfact/counterfact_rome_1129.json`` (relation id dropped, converted to
EasyEdit's ``prompt / subject / ground_truth / target_new / rephrase_prompt / locality_prompt /
locality_ground_truth``), then the first 10 other records of ``counterfact/counterfact_easyedit_val_1919.json`` whose prompt
asks for a capital. Used as ``zerounlearn audit --data OUT --known-only --n K`` (see benchmarks/RESULTS.md).

    python benchmarks/audit/thin_pool_file.py --data-dir ../shared/data --out /tmp/capitals20.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def build(data_dir: Path) -> list:
    rome = json.loads((data_dir / "counterfact" / "counterfact_rome_1129.json").read_text(encoding="utf-8"))
    records = []
    for r in rome:
        rw = r["requested_rewrite"]
        if rw["relation_id"] != "P36":
            continue
        records.append({"case_id": f"rome-{r['case_id']}", "prompt": rw["prompt"].format(rw["subject"]),
                        "subject": rw["subject"], "ground_truth": rw["target_true"]["str"],
                        "target_new": rw["target_new"]["str"], "rephrase_prompt": r["paraphrase_prompts"][0],
                        "locality_prompt": r["neighborhood_prompts"][0], "locality_ground_truth": rw["target_true"]["str"]})
    val = json.loads((data_dir / "counterfact" / "counterfact_easyedit_val_1919.json").read_text(encoding="utf-8"))
    seen = {r["prompt"] for r in records}
    capitals = [dict(r, case_id=f"val-{r['case_id']}") for r in val
                if "capital" in r["prompt"].replace(r["subject"], "").lower() and r["prompt"] not in seen]
    return records + capitals[: 20 - len(records)]


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
