#!/usr/bin/env bash
# Issue 48 experiment, REPORT data (val file, n = 1,000; seed 1: 12.18's cases, seed 2: 12.23's), against the
# shipped file's rows of 12.24 on the same cases. Usage: run_val.sh neutral SEED
set -euo pipefail
D=benchmarks/results/gemma/neutral_stepped S=$2
benchmarks/scale/batch_row.sh $D/gemma-many-$1.yaml val 1000 "$S" $D/$1/val \
  "benchmarks/results/gemma/target_size/rule/val/seed_$S/*.json" $D/rows_$1_val_seed${S}_n1000.md
