#!/usr/bin/env bash
# Issue 48: the shipped gemma-3-270m-retain.yaml (what `init-hparams --retain --measure` writes behind a post-MLP norm,
# RESULTS 12.34) at n = 10 on the val-known draws of 12.23 / 12.30, with a same-answer:10 retain set, perplexity on
# 4000 tokens read both ways (windows opening with BOS, and as tokenized).
#   bash benchmarks/results/gemma/retain_rule/run.sh SEEDS     # e.g. 1 2 3 4 5
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/retain_rule
HP=${HP:-hparams/ZeroUnlearn-GD/gemma-3-270m-retain.yaml}
VAL=benchmarks/results/gemma/measure/cf_val_gemma_known.json
for seed in "$@"; do
  out=$D/val_seed${seed}_n10.json
  [ -f "$out" ] && continue
  nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams $HP --data-path $VAL --n 10 --seed $seed \
    --retain same-answer:10 --ppl-tokens 4000 --variant "retain_yaml:" --out $out.part > $D/val_seed${seed}_n10.log 2>&1
  mv $out.part $out
done
