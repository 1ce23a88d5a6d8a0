#!/usr/bin/env bash
# Issue 48 lever: a retain set of 500 train prompts on TUNE data (train file, seed 1, n = 300: 12.18's cases).
# The baseline row (the shipped gemma-3-270m-many.yaml) is 12.18's run on the same cases (not rerun here).
set -euo pipefail
G=benchmarks/results/gemma
benchmarks/scale/batch_row.sh $G/retain_set/gemma-many-retain500.yaml train 300 1 $G/retain_set/train \
  'benchmarks/results/gemma/rank_step/train/seed_1/*.json' \
  $G/retain_set/train/rows_train_n300.md
