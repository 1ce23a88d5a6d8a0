#!/usr/bin/env bash
# Issue 48 lever: a retain set of 500 train prompts on TUNE data (train file, seed 1, n = 300: 12.18's cases).
# The baseline row (the shipped gemma-3-270m-many.yaml) is 12.18's run on the same cases (not rerun here).
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/retain_set
nice -n 5 zerounlearn bench-scale batch --hparams $D/gemma-many-retain500.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json --n 300 --target-chunk 50 \
  --seeds 1 --ppl-tokens 5000 -q --out $D/train
python benchmarks/scale/rows_table.py benchmarks/results/gemma/rank_step/train/seed_1/*.json \
  $D/train/seed_1/*.json > $D/train/rows_train_n300.md
