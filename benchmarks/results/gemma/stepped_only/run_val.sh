#!/usr/bin/env bash
# Issue 48: solve_stepped_only on REPORT data (val file, seed 1, n = 1,000: 12.12's and 12.18's cases).
# The experiment lives on the branch i48-held (commit d33d868): run this with that branch's code and
# benchmarks/scale/batch_row.sh from main.
# The baseline row (the shipped gemma-3-270m-many.yaml) is 12.18's run on the same cases (not rerun here).
set -euo pipefail
G=benchmarks/results/gemma
benchmarks/scale/batch_row.sh $G/stepped_only/gemma-many-stepped-only.yaml val 1000 1 $G/stepped_only/val \
  'benchmarks/results/gemma/rank_step/val/seed_1/*.json' \
  $G/stepped_only/val/rows_val_n1000.md
