#!/usr/bin/env bash
# Issue 48, after RESULTS 12.34's fresh check: gemma-3-270m-retain.yaml with the retain set a user drafts with
# `zerounlearn retain-set` (same answer only, from the whole CounterFact train file, the facts the model knows served)
# instead of the bench's same-answer:10 draw, on the fresh check's seed-S cases (run.sh report S ran first).
#   bash benchmarks/results/gemma/retain_fresh/run_drafted.sh SEEDS
# Drafted records whose subject or prompt appears in a scored prompt of the run (CounterFact neighbours share the
# answer, so a same-answer draw can name them) are dropped before the edit and counted in the log: keeping them
# would score Spe on facts the edit was told to keep.
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/retain_fresh
KNOWN=$D/cf_train7000-8999_gemma_known.json
TRAIN=$ZEROUNLEARN_DATA_DIR/counterfact/counterfact_easyedit_train_9484.json
for seed in "$@"; do
  out=$D/drafted_seed${seed}_n50.json
  [ -f "$out" ] && continue
  python - "$D/seed${seed}_n50.json" "$KNOWN" "$D/drafted_facts_seed${seed}.json" <<'PY'
import json, sys
run, known, facts = sys.argv[1:]
ids = [str(i) for i in json.load(open(run))["case_ids"]]
records = {str(r["case_id"]): r for r in json.load(open(known))}
json.dump([{"prompt": records[i]["prompt"], "subject": records[i]["subject"], "answer": records[i]["ground_truth"]}
           for i in ids], open(facts, "w"), indent=1)
PY
  python -m zerounlearn_editor retain-set --facts $D/drafted_facts_seed${seed}.json --pool "$TRAIN" \
    --model gemma3-270m --seed $seed --out $D/drafted_retain_seed${seed}.json > $D/drafted_seed${seed}_n50.log 2>&1
  python - "$D/seed${seed}_n50.json" "$KNOWN" "$D/drafted_retain_seed${seed}.json" "$D/drafted_from_seed${seed}.json" \
    >> $D/drafted_seed${seed}_n50.log 2>&1 <<'PY'
import json, sys
from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint
run, known, drafted, wrapped = sys.argv[1:]
ids = [str(i) for i in json.load(open(run))["case_ids"]]
by_id = {str(c.case_id): c for c in load_cases("counterfact-easyedit", path=known)}
cases = [by_id[i] for i in ids]
kept, dropped = [], 0
for record in json.load(open(drafted)):
    request = {"prompt": record["prompt"], "subject": record["subject"]}
    try:
        check_retain_disjoint([request], cases)
        kept.append(request)
    except BenchConfigError:
        dropped += 1
print(f"drafted retain set: {len(kept) + dropped} records, {dropped} dropped for naming a scored subject or prompt")
json.dump({"case_ids": [c.case_id for c in cases], "retain": kept}, open(wrapped, "w"), indent=1)
PY
  nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-retain.yaml \
    --data-path $KNOWN --n 50 --seed $seed --retain-from $D/drafted_from_seed${seed}.json --ppl-tokens 4000 \
    --variant "retain_drafted:" --out $out.part >> $D/drafted_seed${seed}_n50.log 2>&1
  mv $out.part $out
done
