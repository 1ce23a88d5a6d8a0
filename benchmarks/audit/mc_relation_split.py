"""Multiple-choice wins split by whether a fact's distractors share its relation.

The audit draws a fact's MC distractors from its own relation first and fills up from any relation when the
relation has too few allowed answers (``evaluation.audit.items.distractor_facts``); the plan records only how many
facts got three same-relation distractors. This rebuilds each fact's draw as the audit does (same pool, same
seed: the plan's options are checked against it) and prints, per method row of the seed file, the MC wins among
the facts whose three distractors all share the relation and among the others (where the true answer can win by
being of the right kind: "Africa" against "Hamas", "Fiat", "Sega").

    ZEROUNLEARN_DATA_DIR=../shared/data PYTHONPATH=. python benchmarks/audit/mc_relation_split.py \\
        benchmarks/results/audit/lever2_report_n40_m8/audit_seed_1.json [more seed files] --out OUT.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.evaluation.audit.items import (
    audit_pool,
    builtin_pool,
    distractor_facts,
    forbidden_of,
    items_from_cases,
    pool_from_cases,
    same_relation,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seed_files", nargs="+")
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    all_cases = load_cases(args.data)
    pool = audit_pool(pool_from_cases(list(all_cases)), builtin_pool())
    by_id = {c.case_id: c for c in all_cases}
    out = {}
    for path in args.seed_files:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        items = items_from_cases([by_id[i] for i in record["case_ids"]])
        forbidden = forbidden_of(items)
        choices = len(record["plan"]["choice_options"][0])
        picked = [distractor_facts(i, pool, choices - 1, forbidden, record["seed"]) for i in items]
        rebuilt = [[i.answer, *(f.answer.strip() for f in facts)] for i, facts in zip(items, picked)]
        if rebuilt != record["plan"]["choice_options"]:
            raise SystemExit(f"{path}: the rebuilt MC options differ from the plan's")
        same = [bool(facts) and same_relation(i, facts) == len(facts) for i, facts in zip(items, picked)]
        rows = {}
        for name, method in record["methods"].items():
            wins = method["probes"]["mc"]["items"]
            rows[name] = {"same_relation": [sum(w for w, s in zip(wins, same) if s), sum(same)],
                          "other": [sum(w for w, s in zip(wins, same) if not s), len(same) - sum(same)]}
            print(f"{path} {name}: MC wins, same-relation distractors {rows[name]['same_relation'][0]}/"
                  f"{rows[name]['same_relation'][1]}, others {rows[name]['other'][0]}/{rows[name]['other'][1]}")
        out[path] = {"same_relation_facts": same, "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
