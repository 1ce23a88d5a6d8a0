"""Where ``rank_below_alternatives`` draws its alternatives from, against the audit's MC distractors.

The lever's alternatives for a forgotten fact are the first tokens of the other forgotten facts' answers in the same
edit, the ``k`` the unedited model finds most likely at the fact's answer position. This reads an audit's seed file
(its case ids and the plan's ``choice`` options), rebuilds each fact's pool, picks the ``k`` alternatives at the bare
prompt (the edit averages over its context prefixes too; the bare prompt is one of them) and prints, per fact and
in total: how many picked alternatives share the fact's relation (the audit's relation test on CounterFact
templates) and whether any of the pool's tokens is the first token of one of the fact's MC distractors.

    OMP_NUM_THREADS=1 ZEROUNLEARN_DATA_DIR=../shared/data PYTHONPATH=. \\
        python benchmarks/audit/rank_pool_overlap.py benchmarks/results/audit/lever_tune_n40/audit_seed_1.json --k 3

(a diagnosis JSON, ``benchmarks/results/audit/diagnosis/diagnosis.json``, works too: its ``run`` holds both).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.engine.encoding import target_token_ids
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.engine.targets.ranking import alternative_pools, answer_first_tokens
from zerounlearn_editor.evaluation.audit.items import related, relation_of
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seed_file")
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    record = json.loads(Path(args.seed_file).read_text(encoding="utf-8"))
    record = record["run"] if "plan" in record.get("run", {}) else record  # a diagnosis JSON
    by_id = {c.case_id: c for c in load_cases(args.data)}
    cases = [by_id[i] for i in record["case_ids"]]
    options = record["plan"]["choice_options"]
    model, tok = load_model_and_tokenizer(args.model)
    forget = normalize_requests([c.request for c in cases])
    firsts, pools = answer_first_tokens(tok, forget), alternative_pools(tok, forget)
    templates = [relation_of(r.prompt, r.subject) for r in forget]
    rows, same_total, picked_total, overlap_pool, overlap_picked = [], 0, 0, 0, 0
    for i, (request, pool) in enumerate(zip(forget, pools)):
        ids = tok(request.prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1]
        order = sorted(range(len(pool)), key=lambda j: -float(logits[pool[j]]))[: args.k]
        picked = [pool[j] for j in order]
        owner = {t: j for j, t in reversed(list(enumerate(firsts)))}
        same = sum(1 for t in picked if related(templates[owner[t]], templates[i]))
        distractor_firsts = {target_token_ids(tok, d)[0] for d in options[i][1:]}
        rows.append({"case_id": cases[i].case_id, "answer": request.answer,
                     "alternatives": [tok.decode([t]).strip() for t in picked], "same_relation": same,
                     "distractors": options[i][1:], "pool_hits_distractor": bool(distractor_firsts & set(pool)),
                     "picked_hits_distractor": bool(distractor_firsts & set(picked))})
        same_total += same
        picked_total += len(picked)
        overlap_pool += rows[-1]["pool_hits_distractor"]
        overlap_picked += rows[-1]["picked_hits_distractor"]
    summary = {"facts": len(rows), "picked": picked_total, "picked_same_relation": same_total,
               "facts_whose_pool_holds_a_distractor_first_token": overlap_pool,
               "facts_whose_picked_alternatives_hold_one": overlap_picked}
    print(json.dumps(summary))
    for row in rows:
        print(f"{row['case_id']}: {row['answer']!r} -> {row['alternatives']} (same relation {row['same_relation']}); "
              f"MC {row['distractors']}{' POOL HIT' if row['pool_hits_distractor'] else ''}")
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "facts": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
