#!/usr/bin/env bash
# Issue 48 lever, TUNE data (train file, seed 1, n = 300: 12.18's cases): the shipped Gemma --many YAML with a smaller
# target residual. Usage: run_train.sh lr2|lr1|lr05|lr025|clamp0375
set -euo pipefail
D=benchmarks/results/gemma/target_size
benchmarks/scale/batch_row.sh $D/gemma-many-$1.yaml train 300 1 $D/$1/train \
  'benchmarks/results/gemma/corpus_retain/shipped/train/seed_1/*.json' $D/rows_$1_train_n300.md
