#!/usr/bin/env bash
# Issue 48 (RESULTS 12.29): the rules YAML's --retain variant (retain_nullspace_weight 0.1, the shipped -retain.yaml's
# weight, not tuned here) at n = 50 on 12.13-12.15's val-known draws, with the bench's same-answer:10 retain set
# (drawn from the other val-known records; never a scored subject or prompt). The rules YAML's own rows on the same
# draws are 12.23's (benchmarks/results/gemma/bos_ppl/rules_val_seed<S>_n50.json). Usage: run_val.sh SEEDS...
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/retain_n50
VAL=benchmarks/results/gemma/measure/cf_val_gemma_known.json
for seed in "$@"; do
  out=$D/val_seed${seed}_n50.json
  [ -f "$out" ] && continue
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
    --data-path $VAL --n 50 --seed $seed --ppl-tokens 4000 --retain same-answer:10 \
    --variant "retain:retain_nullspace_weight=0.1" --out $out.part > $D/val_seed${seed}_n50.log 2>&1
  mv $out.part $out
done
