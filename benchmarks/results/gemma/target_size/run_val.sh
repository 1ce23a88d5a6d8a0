#!/usr/bin/env bash
# Issue 48 lever, REPORT data (val file, n = 1,000; seed 1: 12.18's cases, seed 2: 12.23's), perplexity windows with
# BOS, against the shipped Gemma --many rows of 12.23 on the same cases. Usage: run_val.sh rule|lr05 SEED
set -euo pipefail
D=benchmarks/results/gemma/target_size S=$2
benchmarks/scale/batch_row.sh $D/gemma-many-$1.yaml val 1000 "$S" $D/$1/val \
  "benchmarks/results/gemma/bos_ppl/shipped/val/seed_$S/*.json" $D/rows_$1_val_seed${S}_n1000.md
