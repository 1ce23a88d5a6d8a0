#!/usr/bin/env bash
# Issue 48, RESULTS 12.18: SmolLM2's shipped -many.yaml with the rank-0 step selection on section 11's report draw
# (val file, seed 1, n = 1,000; the shipped row is section 11's, same cases, not rerun here).
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/rank_step
nice -n 5 zerounlearn bench-scale batch --hparams $D/smollm2-many-rank0.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 1000 --target-chunk 50 \
  --seeds 1 --ppl-tokens 5000 -q --out $D/smollm2_val
python benchmarks/scale/rows_table.py benchmarks/results/scale/report_val_suppress_a0/seed_1/*c300_n1000.json \
  $D/smollm2_val/seed_1/*.json > $D/smollm2_val/rows_val.md
