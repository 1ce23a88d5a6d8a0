#!/usr/bin/env bash
# Issue 48: the shipped Gemma --many YAML (v_lr by the median-coordinate rule, RESULTS 12.24) on a third report draw
# (val file, n = 1,000, seed 3), perplexity windows with BOS; no stored row of the earlier file on these cases, so
# the table holds this row alone.
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/target_size
nice -n 5 zerounlearn bench-scale batch --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 1000 --target-chunk 50 \
  --seeds 3 --ppl-tokens 5000 -q --out $D/shipped_seed3/val
python benchmarks/scale/rows_table.py $D/shipped_seed3/val/seed_3/*.json > $D/rows_shipped_val_seed3_n1000.md
