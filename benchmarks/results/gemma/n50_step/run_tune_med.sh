#!/usr/bin/env bash
# Issue 48, TUNE (train-known n = 50, seed 1, as run_tune.sh): the neutral-target step by the residual's median
# coordinate (0.885 on Gemma, the rule --many's answer-suppression targets take), with 75 steps to reach the stop.
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/n50_step
nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
  --data-path benchmarks/results/gemma/n50/cf_train700_gemma_known.json --n 50 --seed 1 --ppl-tokens 4000 \
  --variant "med75:v_lr=0.885,v_num_grad_steps=75" \
  --out $D/tune_med_train_seed1_n50.json > $D/tune_med_train_seed1_n50.log 2>&1
