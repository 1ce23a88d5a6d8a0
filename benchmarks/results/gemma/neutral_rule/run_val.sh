#!/usr/bin/env bash
# Issue 48, REPORT (12.13-12.15's val-known draws, n = 50): the rules YAML with the neutral-target step rule chosen
# on TUNE (run_tune.sh geo50: v_lr 2.71, the geometric mean of the RMS and median-coordinate rules, 50 steps);
# perplexity on 4000 tokens read both ways. The shipped rows on the same draws are 12.23's
# (../bos_ppl/rules_val_seed<S>_n50.json); 12.26's v_lr 2.07 rows are ../n50_step/val_seed<S>_n50.json.
# n10: the same draws at n = 10 with the step count the rule writes (44; every n = 50 target stopped by step 25).
# Usage: run_val.sh n50|n10 SEEDS...
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/neutral_rule
case ${1:-} in
  n50) n=50 variant="geo50:v_lr=2.71,v_num_grad_steps=50" ;;
  n10) n=10 variant="geo44:v_lr=2.71,v_num_grad_steps=44" ;;
  *) echo "usage: $0 n50|n10 SEEDS..." >&2; exit 2 ;;
esac
shift
for seed in "$@"; do
  out=$D/val_${variant%%:*}_seed${seed}_n$n.json
  [ -f "$out" ] && continue
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
    --data-path benchmarks/results/gemma/measure/cf_val_gemma_known.json --n $n --seed $seed --ppl-tokens 4000 \
    --variant "$variant" --out $out.part > ${out%.json}.log 2>&1
  mv $out.part $out
done
