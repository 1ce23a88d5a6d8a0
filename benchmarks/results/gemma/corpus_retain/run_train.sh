#!/usr/bin/env bash
# Issue 48 lever, TUNE data (train file, seed 1, n = 300: 12.18's cases): the shipped Gemma --many YAML with a retain
# set of corpus entities. Usage: run_train.sh bare500|sentence500|shipped
set -euo pipefail
D=benchmarks/results/gemma/corpus_retain
case "$1" in
  shipped) Y=hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml ;;
  *) Y=$D/gemma-many-$1.yaml ;;
esac
benchmarks/scale/batch_row.sh $Y train 300 1 $D/$1/train \
  'benchmarks/results/gemma/rank_step/train/seed_1/*.json' $D/rows_$1_train_n300.md
