#!/usr/bin/env bash
# Issue 48: the rules YAML (what init-hparams writes without --retain behind a post-MLP norm) and med75_rep1 (the
# --retain rule's settings less its retain key: v_lr 0.885 by the median coordinate, 75 target steps, one repair
# round) on new draws, CounterFact train records 3000-4999 that Gemma-3-270m knows, and med75_rep1 at n = 10 on the
# val draws of 12.23 / 12.30. No retain set. The rule these rows are read by: notebook 2026-12-02-gemma-corpus-retain.
#   bash benchmarks/results/gemma/plain_fresh/run.sh known A B     # score train records A..B-1 into $D/known_A_B.json
#   bash benchmarks/results/gemma/plain_fresh/run.sh merge         # $D/cf_train3000-4999_gemma_known.json, file order
#   bash benchmarks/results/gemma/plain_fresh/run.sh report SEEDS  # n = 50 on the merged file, both variants
#   bash benchmarks/results/gemma/plain_fresh/run.sh val10 SEEDS   # n = 10 on the val-known file, med75_rep1
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/plain_fresh
KNOWN=$D/cf_train3000-4999_gemma_known.json
TRAIN=$ZEROUNLEARN_DATA_DIR/counterfact/counterfact_easyedit_train_9484.json
RULES=hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml
MED="med75_rep1:v_lr=0.885,v_num_grad_steps=75,repair_rounds=1"
# the rules YAML as it stood when these rows ran (bb678e2: its own keys, stored as settings {}); since 12.35 the file
# holds med75_rep1's keys, so a rerun names the old ones
OLD="rules_yaml:v_lr=8.29,v_num_grad_steps=25,repair_rounds=0"
stage=$1; shift
case $stage in
  known)  # records $1..$2-1 of the train file
    nice -n ${NICE:-5} python benchmarks/gemma_measure/known_file.py --model gemma3-270m --data "$TRAIN" --start $1 \
      --stop $2 --out $D/known_$1_$2.json > $D/known_$1_$2.log 2>&1 ;;
  merge)
    python benchmarks/gemma_measure/known_file.py --merge $KNOWN $D/known_3000_4000.json $D/known_4000_5000.json ;;
  report)
    for seed in "$@"; do
      out=$D/seed${seed}_n50.json
      [ -f "$out" ] && continue
      nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams $RULES --data-path $KNOWN --n 50 --seed $seed \
        --ppl-tokens 4000 --variant "$OLD" --variant "$MED" --out $out.part > $D/seed${seed}_n50.log 2>&1
      mv $out.part $out
    done ;;
  val10)
    for seed in "$@"; do
      out=$D/val_seed${seed}_n10.json
      [ -f "$out" ] && continue
      nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams $RULES \
        --data-path benchmarks/results/gemma/measure/cf_val_gemma_known.json --n 10 --seed $seed --ppl-tokens 4000 \
        --variant "$MED" --out $out.part > $D/val_seed${seed}_n10.log 2>&1
      mv $out.part $out
    done ;;
  *) echo "usage: $0 known A B | merge | report SEEDS... | val10 SEEDS..." >&2; exit 2 ;;
esac
