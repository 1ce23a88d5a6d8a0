"""3-shot in-context recovery split by whether a fact's three borrowed examples all share its relation.

The second set's pool (the EasyEdit train file, 9,484 cases) gives every fact three same-relation examples; the val
file's pool gave 24 of the REPORT half's 40 (and 31 of each never-known draw's 40). This rebuilds each audit's 3-shot
examples exactly as the audit drew them (``borrow``, the audit's seed as the plan seed, tag ``ic:<case id>``;
checked against the examples the audit JSON stores) and counts the ``ic3`` recoveries of each row on both kinds of fact.

    PYTHONPATH=. ZEROUNLEARN_DATA_DIR=../shared/data python benchmarks/results/audit/report2/ic3_same_relation.py
"""
import json
import logging
from pathlib import Path
from typing import Dict, List, Tuple

from zerounlearn_editor.data.datasets import default_data_dir, load_cases
from zerounlearn_editor.evaluation.audit.items import (
    audit_pool,
    borrow,
    builtin_pool,
    forbidden_of,
    items_from_cases,
    pool_from_cases,
    same_relation,
)

LOG = logging.getLogger("ic3_same_relation")
A = "benchmarks/results/audit"
TRAIN = "counterfact/counterfact_easyedit_train_9484.json"


def flags(record: dict, all_cases) -> List[bool]:
    """Per audited fact (record order): whether its 3 examples all share its relation."""
    by_id = {c.case_id: c for c in all_cases}
    items = items_from_cases([by_id[i] for i in record["case_ids"]])
    pool = audit_pool(pool_from_cases(list(all_cases)), builtin_pool())
    forbidden = forbidden_of(items)
    out = []
    for item, stored in zip(items, record["plan"]["in_context"]["3"]):
        ex = borrow(pool, item.relation, 3, forbidden, record["seed"], f"ic:{item.case_id}")
        rebuilt = [" ".join(f"{f.prompt} {f.answer}".split()) for f in ex]
        if rebuilt != [" ".join(s.split()) for s in stored]:
            raise ValueError(f"{item.case_id}: rebuilt examples {rebuilt} differ from the audit's {stored}")
        out.append(bool(ex) and same_relation(item, ex) == len(ex))
    return out


def split(record: dict, name: str, same: List[bool]) -> Tuple[int, int, int, int]:
    """(recovered among same-relation facts, same-relation facts, recovered among the others, others)."""
    items = record["methods"][name]["probes"]["ic3"]["items"]
    a = sum(bool(v) for v, s in zip(items, same) if s)
    b = sum(bool(v) for v, s in zip(items, same) if not s)
    return a, sum(same), b, len(same) - sum(same)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    val = load_cases("counterfact-easyedit")
    train = load_cases(default_data_dir() / TRAIN)
    runs: List[Tuple[str, str, str, object]] = [
        ("robust, REPORT half (rm-qk)", f"{A}/qkeys_report_n40_probes/audit_seed_1.json", "rm-qk", val),
        ("paper, REPORT half", f"{A}/ship_report_n40/audit_seed_1.json", "ZeroUnlearn-GD", val),
        ("never-known draw 1 (base)", f"{A}/never_known/audit_seed1_n40/audit_seed_1.json", "base", val),
        ("never-known draw 2 (base)", f"{A}/never_known/audit_draw2_n40/audit_seed_1.json", "base", val),
        ("robust, second set", f"{A}/report2/robust_probes/audit_seed_1.json", "robust", train),
        ("paper, second set", f"{A}/report2/paper_probes/audit_seed_1.json", "ZeroUnlearn-GD", train),
    ]
    cache: Dict[str, List[bool]] = {}
    print("| row | 3-shot recovered, same-relation examples | 3-shot recovered, other examples |")
    print("|---|---|---|")
    for label, path, name, cases in runs:
        if not Path(path).is_file():
            continue
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        key = ",".join(record["case_ids"])
        if key not in cache:
            cache[key] = flags(record, cases)
        a, n1, b, n2 = split(record, name, cache[key])
        print(f"| {label} | {a} of {n1} | {b} of {n2} |")


if __name__ == "__main__":
    main()
