#!/usr/bin/env bash
# Issue 48: SmolLM2's shipped -many.yaml with the rank-0 step selection on section 11's other report draws
# (val file, seed S in {2, 3}, n = 1,000; the shipped rows are section 11's, same cases, not rerun here).
# Usage: run_smollm2_seeds23.sh SEED
set -euo pipefail
G=benchmarks/results/gemma
S=$1
benchmarks/scale/batch_row.sh $G/rank_step/smollm2-many-rank0.yaml val 1000 $S $G/rank_step/smollm2_val_seed$S \
  "benchmarks/results/scale/report_val_suppress_a0/seed_$S/*c300_n1000.json" \
  $G/rank_step/smollm2_val_seed$S/rows_val.md
