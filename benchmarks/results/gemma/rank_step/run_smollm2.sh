#!/usr/bin/env bash
# Issue 48, RESULTS 12.18: SmolLM2's shipped -many.yaml with the rank-0 step selection on section 11's report draw
# (val file, seed 1, n = 1,000; the shipped row is section 11's, same cases, not rerun here).
set -euo pipefail
G=benchmarks/results/gemma
benchmarks/scale/batch_row.sh $G/rank_step/smollm2-many-rank0.yaml val 1000 1 $G/rank_step/smollm2_val \
  'benchmarks/results/scale/report_val_suppress_a0/seed_1/*c300_n1000.json' \
  $G/rank_step/smollm2_val/rows_val.md
