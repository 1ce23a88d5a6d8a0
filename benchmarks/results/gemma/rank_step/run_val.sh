#!/usr/bin/env bash
# Issue 48, RESULTS 12.18: the rank-0 step selection on REPORT data (val file, seed 1, n = 1,000: 12.12's draw).
# The baseline row is 12.12's (gemma-many-th10x-tw100.yaml, the same 1,000 cases; not rerun here).
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/rank_step
nice -n 5 zerounlearn bench-scale batch --hparams $D/gemma-many-tw100-rank0.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 1000 --target-chunk 50 \
  --seeds 1 --ppl-tokens 5000 -q --out $D/val
python benchmarks/scale/rows_table.py benchmarks/results/gemma/textpen_many/val/seed_1/*_n1000.json \
  $D/val/seed_1/*.json > $D/val/rows_val.md
