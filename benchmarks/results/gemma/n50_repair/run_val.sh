#!/usr/bin/env bash
# Issue 48 (RESULTS 12.33) REPORT: run_tune.sh's two variants (rep1: the rules YAML with one repair round; med75_rep1:
# also v_lr 0.885, 75 steps) on the val-known draws of 12.13-12.15 and 12.30 (n = 50, seeds given); the shipped rows
# on the same draws are bos_ppl/rules_val_seed{1,2,3}_n50.json and seeds45/rules_val_seed{4,5}_n50.json.
# Usage: run_val.sh SEEDS...   -> val_seed<S>_n50.json
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/n50_repair
for seed in "$@"; do
  out=$D/val_seed${seed}_n50.json
  [ -f "$out" ] && continue
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
    --data-path benchmarks/results/gemma/measure/cf_val_gemma_known.json --n 50 --seed $seed --ppl-tokens 4000 \
    --variant "rep1:repair_rounds=1" --variant "med75_rep1:v_lr=0.885,v_num_grad_steps=75,repair_rounds=1" \
    --out $out.part > $D/val_seed${seed}_n50.log 2>&1
  mv $out.part $out
done
