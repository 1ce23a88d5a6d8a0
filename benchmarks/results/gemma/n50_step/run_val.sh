#!/usr/bin/env bash
# Issue 48, REPORT (12.13-12.15's val-known draws, n = 50, seeds given): the rules YAML with a smaller neutral-target
# step, perplexity on 4000 tokens read both ways; the shipped rows on the same draws are 12.23's
# (benchmarks/results/gemma/bos_ppl/rules_val_seed<S>_n50.json).
#   lr2s50: v_lr 2.07, 50 steps (the TUNE winner of run_tune.sh)        -> val_seed<S>_n50.json
#   med75:  v_lr 0.885 (the median-coordinate rule), 75 steps (run_tune.sh med75) -> val_med_seed<S>_n50.json
# Usage: run_val.sh lr2s50|med75 SEEDS...
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/n50_step
VAL=benchmarks/results/gemma/measure/cf_val_gemma_known.json
case ${1:-} in
  lr2s50) settings="v_lr=2.07,v_num_grad_steps=50" prefix=val ;;
  med75) settings="v_lr=0.885,v_num_grad_steps=75" prefix=val_med ;;
  *) echo "usage: $0 lr2s50|med75 SEEDS..." >&2; exit 2 ;;
esac
variant=$1; shift
for seed in "$@"; do
  out=$D/${prefix}_seed${seed}_n50.json
  [ -f "$out" ] && continue
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
    --data-path $VAL --n 50 --seed $seed --ppl-tokens 4000 --variant "$variant:$settings" \
    --out $out.part > $D/${prefix}_seed${seed}_n50.log 2>&1
  mv $out.part $out
done
