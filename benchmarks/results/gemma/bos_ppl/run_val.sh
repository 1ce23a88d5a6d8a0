#!/usr/bin/env bash
# REPORT rows (val, n = 1,000), perplexity windows opening with BOS: the shipped Gemma --many YAML (layers 2-5) and
# the layers 2-7 candidate (12.22). Seed 1: 12.18's cases, against the rows scored as tokenized. Seed 2: layers 2-7
# against the shipped row. Usage: run_val.sh shipped|layers2-7 [SEED]
set -euo pipefail
D=benchmarks/results/gemma/bos_ppl S=${2:-1}
OLD=$D/shipped/val/seed_$S/'*.json' OLD_W=$D/shipped/val/seed_$S/'*.json'
if [ "$S" = 1 ]; then
  OLD='benchmarks/results/gemma/rank_step/val/seed_1/*.json' OLD_W='benchmarks/results/gemma/layers_many/val/seed_1/*.json'
fi
case "$1" in
  shipped) Y=hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml ;;
  layers2-7) Y=benchmarks/results/gemma/layers_many/gemma-many-layers2-7.yaml OLD=$OLD_W ;;
  *) echo "usage: $0 shipped|layers2-7 [SEED]" >&2; exit 2 ;;
esac
benchmarks/scale/batch_row.sh $Y val 1000 "$S" $D/$1/val "$OLD" $D/rows_$1_val_seed${S}_n1000.md
