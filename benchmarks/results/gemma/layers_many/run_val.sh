#!/usr/bin/env bash
# REPORT row: val, seed 1, n = 1,000, against 12.18's shipped row on the same cases.
set -euo pipefail
D=benchmarks/results/gemma/layers_many
benchmarks/scale/batch_row.sh $D/gemma-many-layers2-7.yaml val 1000 1 $D/val \
  'benchmarks/results/gemma/rank_step/val/seed_1/*.json' $D/rows_val_n1000.md
