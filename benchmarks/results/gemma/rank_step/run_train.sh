#!/usr/bin/env bash
# Issue 48, RESULTS 12.18: the rank-0 step selection on TUNE data (train file, seed 1, n = 300: 12.16's cases).
# The baseline row (gemma-many-th10x-tw100.yaml) is 12.16's run on the same cases (not rerun here).
set -euo pipefail
G=benchmarks/results/gemma
benchmarks/scale/batch_row.sh $G/rank_step/gemma-many-tw100-rank0.yaml train 300 1 $G/rank_step/train \
  benchmarks/results/gemma/many_levers/train/seed_1/many_levers_gemma-many-th10x-tw100_n300.json \
  $G/rank_step/train/rows_train_n300.md
