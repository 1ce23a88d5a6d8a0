#!/usr/bin/env bash
# Issue 48, TUNE (train-known n = 50, seed 1; 12.14's tune cases, the same draw as ../n50_step/run_tune.sh): candidate
# rules for the neutral targets' Adam step, perplexity read with BOS windows (4000 tokens).
#   geo50:  v_lr 2.71 = the geometric mean of the RMS rule (8.29) and the median-coordinate rule (0.885), 50 steps
#   med_es: v_lr 0.885 (median-coordinate rule), 100 steps, v_early_stop_loss 0.01 (a tighter stop)
# Usage: run_tune.sh geo50|med_es
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/neutral_rule
case ${1:-} in
  geo50) settings="v_lr=2.71,v_num_grad_steps=50" ;;
  med_es) settings="v_lr=0.885,v_num_grad_steps=100,v_early_stop_loss=0.01" ;;
  *) echo "usage: $0 geo50|med_es" >&2; exit 2 ;;
esac
out=$D/tune_$1_train_seed1_n50.json
[ -f "$out" ] && exit 0
nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
  --data-path benchmarks/results/gemma/n50/cf_train700_gemma_known.json --n 50 --seed 1 --ppl-tokens 4000 \
  --variant "$1:$settings" --out $out.part > ${out%.json}.log 2>&1
mv $out.part $out
