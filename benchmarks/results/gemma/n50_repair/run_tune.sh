#!/usr/bin/env bash
# Issue 48 (RESULTS 12.33) TUNE: the rules YAML (gemma-3-270m-rules.yaml, init-hparams' first try) at n = 50 with one
# repair round (12.32's key), alone and with the median-coordinate step of answer-suppression targets (v_lr 0.885,
# 75 steps, 12.26's med75) that kept Spe but forgot less; train-known n = 50, seed 1 (12.14's tune cases).
#   -> tune_train_seed1_n50.json (variants rep1, med75_rep1)
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/n50_repair
nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
  --data-path benchmarks/results/gemma/n50/cf_train700_gemma_known.json --n 50 --seed 1 --ppl-tokens 4000 \
  --variant "rep1:repair_rounds=1" --variant "med75_rep1:v_lr=0.885,v_num_grad_steps=75,repair_rounds=1" \
  --out $D/tune_train_seed1_n50.json.part > $D/tune_train_seed1_n50.log 2>&1
mv $D/tune_train_seed1_n50.json.part $D/tune_train_seed1_n50.json
