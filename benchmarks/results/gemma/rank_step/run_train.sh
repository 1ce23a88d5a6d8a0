#!/usr/bin/env bash
# Issue 48, RESULTS 12.18: the rank-0 step selection on TUNE data (train file, seed 1, n = 300: 12.16's cases).
# The baseline row (gemma-many-th10x-tw100.yaml) is 12.16's run on the same cases (not rerun here).
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/rank_step
nice -n 5 zerounlearn bench-scale batch --hparams $D/gemma-many-tw100-rank0.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json --n 300 --target-chunk 50 \
  --seeds 1 --ppl-tokens 5000 -q --out $D/train
python benchmarks/scale/rows_table.py benchmarks/results/gemma/many_levers/train/seed_1/many_levers_gemma-many-th10x-tw100_n300.json \
  $D/train/seed_1/*.json > $D/train/rows_train_n300.md
