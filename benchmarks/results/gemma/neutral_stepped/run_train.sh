#!/usr/bin/env bash
# Issue 48 experiment, TUNE data (train file, seed 1, n = 300: 12.18's cases): the shipped Gemma --many YAML (rule)
# against neutral (EOS) targets on the argmax-known facts only (neutral). Usage: run_train.sh rule|neutral
set -euo pipefail
D=benchmarks/results/gemma/neutral_stepped
benchmarks/scale/batch_row.sh $D/gemma-many-$1.yaml train 300 1 $D/$1/train \
  'benchmarks/results/gemma/corpus_retain/shipped/train/seed_1/*.json' $D/rows_$1_train_n300.md
