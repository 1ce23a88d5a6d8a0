#!/usr/bin/env bash
# Issue 48: solve_stepped_only on TUNE data (train file, seed 1, n = 300: 12.16's and 12.18's cases).
# The experiment lives on the branch i48-held (commit d33d868): run this with that branch's code and
# benchmarks/scale/batch_row.sh from main.
# The baseline row (gemma-many-tw100-rank0.yaml = the shipped gemma-3-270m-many.yaml) is 12.18's run (not rerun).
set -euo pipefail
G=benchmarks/results/gemma
benchmarks/scale/batch_row.sh $G/stepped_only/gemma-many-stepped-only.yaml train 300 1 $G/stepped_only/train \
  'benchmarks/results/gemma/rank_step/train/seed_1/*.json' \
  $G/stepped_only/train/rows_train_n300.md
