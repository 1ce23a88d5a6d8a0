#!/usr/bin/env bash
# Issue 48, RESULTS 12.16: the chosen lever on REPORT data (val file, seed 1). --n 300,1000 so that the draw is
# 12.4's / 12.12's (the n = 300 row takes the first 300 of the 1,000 drawn); rows run small first.
# Usage: run_val.sh <yaml> [<yaml> ...]
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/many_levers
args=()
for y in "$@"; do args+=(--hparams "$y"); done
nice -n 5 zerounlearn bench-scale batch "${args[@]}" \
  --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 300,1000 --target-chunk 50 \
  --seeds 1 --ppl-tokens 5000 -q --out $D/val
python benchmarks/scale/rows_table.py benchmarks/results/gemma/textpen_many/val/seed_1/*_n300.json \
  $D/val/seed_1/*.json > $D/val/rows_val.md
