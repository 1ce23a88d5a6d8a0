#!/bin/bash
# issue 48, RESULTS 12.15: {key_reach: 0.6} with the retain-aware keys of `init-hparams --retain` on Gemma-3-270m.
#   bash benchmarks/results/gemma/retain_reach/run.sh tune            # 1. tune (train-known n = 50, seed 1)
#   bash benchmarks/results/gemma/retain_reach/run.sh report 1 2 3    # 2. report (val-known n = 50, 12.14's draws)
#   bash benchmarks/results/gemma/retain_reach/run.sh n10 1 2 3       # 3. val-known n = 10
# One process at a time; each writes its JSON after every variant (a killed run keeps its finished rows).
set -e
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/retain_reach
RULES=benchmarks/results/gemma/rules/gemma-rules.yaml
VAL=benchmarks/results/gemma/measure/cf_val_gemma_known.json
TRAIN=benchmarks/results/gemma/n50/cf_train700_gemma_known.json
# the tune bench's stored same-answer:10 draw (139 facts from the 700-record train file; same 50 case ids)
TUNE_RETAIN=benchmarks/results/gemma/n50/tune_train700_n50_suppress_retainmany/seed_1.json
KR='nullspace_text_weight={"key_reach":0.6}'  # experimental={...} when it ran (the key graduated in 12.17)
KR06="kr06:$KR"                                                         # = textweight_rule/gemma-rules-kr06.yaml
KR06R="kr06R:$KR,retain_nullspace_weight=0.1"                           # = retain_reach/gemma-rules-kr06-retain.yaml
KR06RC="kr06Rctx:$KR,retain_nullspace_weight=0.1,context_nullspace_weight=0.1"  # + --many --retain's context term
diag() { nice -n 5 python benchmarks/gemma/layers_diag.py --hparams $RULES --ppl-tokens 4000 "$@"; }
stage=$1; shift
case $stage in
  tune)
    diag --data-path $TRAIN --n 50 --seed 1 --retain-from $TUNE_RETAIN \
      --variant "$KR06R" --variant "$KR06RC" --variant "$KR06" --out $D/tune_train_n50.json > $D/tune_train_n50.log 2>&1 ;;
  report)
    for seed in "$@"; do
      # seed 2: also kr06 (12.14's seed-2 JSON has no per-case rows to pair with)
      extra=(); [ "$seed" = 2 ] && extra=(--variant "$KR06")
      diag --data-path $VAL --n 50 --seed $seed --retain same-answer:10 --variant "$KR06R" "${extra[@]}" \
        --out $D/report_val_seed${seed}_n50.json > $D/report_val_seed${seed}_n50.log 2>&1
    done ;;
  n10)
    for seed in "$@"; do
      diag --data-path $VAL --n 10 --seed $seed --retain same-answer:10 --variant "$KR06" --variant "$KR06R" \
        --variant "rules:" --out $D/val_seed${seed}_n10.json > $D/val_seed${seed}_n10.log 2>&1
    done ;;
  *) echo "usage: $0 tune | report SEEDS... | n10 SEEDS..." >&2; exit 2 ;;
esac
