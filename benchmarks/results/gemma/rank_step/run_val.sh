#!/usr/bin/env bash
# Issue 48, RESULTS 12.18: the rank-0 step selection on REPORT data (val file, seed 1, n = 1,000: 12.12's draw).
# The baseline row is 12.12's (gemma-many-th10x-tw100.yaml, the same 1,000 cases; not rerun here).
set -euo pipefail
G=benchmarks/results/gemma
benchmarks/scale/batch_row.sh $G/rank_step/gemma-many-tw100-rank0.yaml val 1000 1 $G/rank_step/val \
  'benchmarks/results/gemma/textpen_many/val/seed_1/*_n1000.json' \
  $G/rank_step/val/rows_val.md
