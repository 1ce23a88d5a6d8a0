#!/usr/bin/env bash
# Issue 48, REPORT (12.14-12.15's val-known draws, n = 50, seeds given): the rules YAML with the neutral-target step
# by the residual's median coordinate (v_lr 0.885, 75 steps; run_tune_med.sh), perplexity on 4000 tokens read both
# ways; the shipped rows on the same draws are 12.23's.  Usage: run_val_med.sh SEEDS...
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/n50_step
VAL=benchmarks/results/gemma/measure/cf_val_gemma_known.json
for seed in "$@"; do
  out=$D/val_med_seed${seed}_n50.json
  [ -f "$out" ] && continue
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
    --data-path $VAL --n 50 --seed $seed --ppl-tokens 4000 --variant "med75:v_lr=0.885,v_num_grad_steps=75" \
    --out $out.part > $D/val_med_seed${seed}_n50.log 2>&1
  mv $out.part $out
done
