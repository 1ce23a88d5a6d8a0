#!/usr/bin/env bash
# TUNE row: train, seed 1, n = 300, against 12.18's shipped row on the same cases.
set -euo pipefail
D=benchmarks/results/gemma/layers_many
benchmarks/scale/batch_row.sh $D/gemma-many-layers2-7.yaml train 300 1 $D/train \
  'benchmarks/results/gemma/rank_step/train/seed_1/*.json' $D/rows_train_n300.md
