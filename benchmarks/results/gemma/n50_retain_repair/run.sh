#!/usr/bin/env bash
# Issue 48 (started after RESULTS 12.33): the rules YAML at n = 50 with the retain-aware key (12.15's kr06R: Spe 81%,
# 20 of 150 answered) and one repair round, which edits again what the edit left; with the RMS step (R_rep1) and the
# median-coordinate step (R_med75_rep1). Perplexity on 4000 tokens, windows opening with BOS.
#   bash benchmarks/results/gemma/n50_retain_repair/run.sh tune          # train-known n = 50, seed 1 (12.15's retain draw)
#   bash benchmarks/results/gemma/n50_retain_repair/run.sh report SEEDS  # val-known n = 50, retain same-answer:10
# Each writes its JSON after every variant (.part until the run ends).
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/n50_retain_repair
RULES=hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml
VAL=benchmarks/results/gemma/measure/cf_val_gemma_known.json
TRAIN=benchmarks/results/gemma/n50/cf_train700_gemma_known.json
TUNE_RETAIN=benchmarks/results/gemma/n50/tune_train700_n50_suppress_retainmany/seed_1.json
V1="R_rep1:retain_nullspace_weight=0.1,repair_rounds=1"
V2="R_med75_rep1:retain_nullspace_weight=0.1,v_lr=0.885,v_num_grad_steps=75,repair_rounds=1"
diag() { nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams $RULES --ppl-tokens 4000 --variant "$V1" --variant "$V2" "$@"; }
stage=$1; shift
case $stage in
  tune)
    out=$D/tune_train_seed1_n50.json
    [ -f "$out" ] || { diag --data-path $TRAIN --n 50 --seed 1 --retain-from $TUNE_RETAIN --out $out.part \
      > $D/tune_train_seed1_n50.log 2>&1; mv $out.part $out; } ;;
  report)
    for seed in "$@"; do
      out=$D/val_seed${seed}_n50.json
      [ -f "$out" ] && continue
      diag --data-path $VAL --n 50 --seed $seed --retain same-answer:10 --out $out.part > $D/val_seed${seed}_n50.log 2>&1
      mv $out.part $out
    done ;;
  *) echo "usage: $0 tune | report SEEDS..." >&2; exit 2 ;;
esac
