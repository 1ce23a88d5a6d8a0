#!/usr/bin/env bash
# Issue 48, TUNE (train-known n = 50, seed 1; 12.14's tune cases, 12.23's stored kr06 row is the shipped file on
# them): the rules YAML's neutral-target step smaller than the RMS rule's 8.29, perplexity read with BOS windows.
#   lr:    v_lr 4.145 and v_lr 2.07 with 50 steps, in one run           -> tune_train_seed1_n50.json
#   med75: v_lr 0.885 (the residual's median coordinate, the rule --many's answer-suppression targets take),
#          75 steps to reach the stop                                     -> tune_med_train_seed1_n50.json
# Usage: run_tune.sh lr|med75
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/n50_step
case ${1:-} in
  lr) variants=(--variant "lr4:v_lr=4.145" --variant "lr2s50:v_lr=2.07,v_num_grad_steps=50") out=tune_train_seed1_n50 ;;
  med75) variants=(--variant "med75:v_lr=0.885,v_num_grad_steps=75") out=tune_med_train_seed1_n50 ;;
  *) echo "usage: $0 lr|med75" >&2; exit 2 ;;
esac
nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
  --data-path benchmarks/results/gemma/n50/cf_train700_gemma_known.json --n 50 --seed 1 --ppl-tokens 4000 \
  "${variants[@]}" --out $D/$out.json > $D/$out.log 2>&1
