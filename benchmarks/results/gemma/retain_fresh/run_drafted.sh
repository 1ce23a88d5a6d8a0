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
  python benchmarks/gemma/drafted_retain.py facts "$D/seed${seed}_n50.json" "$KNOWN" "$D/drafted_facts_seed${seed}.json"
  python -m zerounlearn_editor retain-set --facts $D/drafted_facts_seed${seed}.json --pool "$TRAIN" \
    --model gemma3-270m --seed $seed --out $D/drafted_retain_seed${seed}.json > $D/drafted_seed${seed}_n50.log 2>&1
  python benchmarks/gemma/drafted_retain.py wrap "$D/seed${seed}_n50.json" "$KNOWN" "$D/drafted_retain_seed${seed}.json" \
    "$D/drafted_from_seed${seed}.json" \
    >> $D/drafted_seed${seed}_n50.log 2>&1
  nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-retain.yaml \
    --data-path $KNOWN --n 50 --seed $seed --retain-from $D/drafted_from_seed${seed}.json --ppl-tokens 4000 \
    --variant "retain_drafted:" --out $out.part >> $D/drafted_seed${seed}_n50.log 2>&1
  mv $out.part $out
done
