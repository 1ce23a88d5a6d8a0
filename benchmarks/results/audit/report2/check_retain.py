"""The --retain same-answer:10 draw of the second known set (seed 1, the train file's pool): its size, the
refusal check the audit runs (check_retain_disjoint), and an independent string check against every scored prompt.

    PYTHONPATH=. ZEROUNLEARN_DATA_DIR=../shared/data python benchmarks/results/audit/report2/check_retain.py
"""
import json
import logging
from pathlib import Path

from zerounlearn_editor.data.datasets import default_data_dir, load_cases
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint, draw_retain, parse_retain_spec

LOG = logging.getLogger("check_retain")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    here = Path(__file__).parent
    cases = load_cases(default_data_dir() / "counterfact/counterfact_easyedit_train_9484.json")
    ids = json.loads((here / "known_train_seed1.json").read_text())["case_ids"]
    by_id = {c.case_id: c for c in cases}
    scored = [by_id[i] for i in ids]
    retain = draw_retain(parse_retain_spec("same-answer:10"), scored, cases, 1)
    check_retain_disjoint(retain, scored)
    prompts = [p.prompt for c in scored for p in (*c.forget, *c.paraphrase, *c.neighbour)]
    subjects = {c.request["subject"] for c in scored}
    hits = [r for r in retain if r["prompt"] in prompts or any(r["subject"] in p for p in prompts)
            or any(s in r["prompt"] for s in subjects)]
    val = {c.case_id: c for c in load_cases("counterfact-easyedit")}
    cached = json.loads(Path("benchmarks/results/deep/known_counterfact_easyedit.json").read_text())["known"]
    old_subjects = {val[i].request["subject"] for i in cached}
    old_prompts = {val[i].request["prompt"] for i in cached}
    result = {"n_retain": len(retain), "check_retain_disjoint": "passed", "string_overlaps": len(hits),
              "new_subjects_in_cached_80": len(subjects & old_subjects),
              "new_prompts_in_cached_80": len({c.request["prompt"] for c in scored} & old_prompts)}
    LOG.info("%s", json.dumps(result))


if __name__ == "__main__":
    main()
