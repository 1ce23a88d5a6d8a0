#!/bin/bash
# issue 48, RESULTS 12.14: {key_reach: 0.6} on Gemma val seeds 3 and 1 (n = 50), the report draws of 12.13 (seed 2: report_gemma_val_seed2_n50.json).
set -e
export ZEROUNLEARN_DATA_DIR=../shared/data PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/textweight_rule
for seed in 3 1; do
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams benchmarks/results/gemma/rules/gemma-rules.yaml \
    --data-path benchmarks/results/gemma/measure/cf_val_gemma_known.json --n 50 --seed $seed --ppl-tokens 4000 \
    --variant 'kr06:experimental={"nullspace_text_weight":{"key_reach":0.6}}' \
    --out $D/report_gemma_val_seed${seed}_n50.json > $D/report_gemma_val_seed${seed}_n50.log 2>&1
done
