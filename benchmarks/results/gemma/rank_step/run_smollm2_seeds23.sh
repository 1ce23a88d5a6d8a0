#!/usr/bin/env bash
# Issue 48: SmolLM2's shipped -many.yaml with the rank-0 step selection on section 11's other report draws
# (val file, seed S in {2, 3}, n = 1,000; the shipped rows are section 11's, same cases, not rerun here).
# Usage: run_smollm2_seeds23.sh SEED
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/rank_step
S=$1
nice -n 5 zerounlearn bench-scale batch --hparams $D/smollm2-many-rank0.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 1000 --target-chunk 50 \
  --seeds $S --ppl-tokens 5000 -q --out $D/smollm2_val_seed$S
python benchmarks/scale/rows_table.py benchmarks/results/scale/report_val_suppress_a0/seed_$S/*c300_n1000.json \
  $D/smollm2_val_seed$S/seed_$S/*.json > $D/smollm2_val_seed$S/rows_val.md
