#!/bin/bash
# issue 48, RESULTS 12.13: the three n = 50 settings of 12.11 on Gemma val seeds 2 and 3, one process per seed, in turn.
set -u
cd "$(dirname "$0")/../../../.."
export ZEROUNLEARN_DATA_DIR=../shared/data PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/textpen_seeds
for seed in "$@"; do
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams benchmarks/results/gemma/rules/gemma-rules.yaml \
    --data-path benchmarks/results/gemma/measure/cf_val_gemma_known.json --n 50 --seed "$seed" --ppl-tokens 4000 \
    --variant "rules:" --variant 'tw10:experimental={"nullspace_text_weight":10}' \
    --variant 'thr10x_tw100:experimental={"nullspace_text_weight":100},nullspace_threshold=0.135' \
    --out $D/report_val_seed${seed}_n50.json > $D/report_val_seed${seed}_n50.log 2>&1
done
