#!/usr/bin/env bash
# Issue 48 experiment on the other family: SmolLM2's -many.yaml with neutral targets on the argmax-known facts only,
# val n = 1,000, seed S (section 11's draws), against the shipped file's rows (RESULTS 12.18-12.19, same cases).
# Usage: run_smollm2.sh SEED
set -euo pipefail
D=benchmarks/results/gemma/neutral_stepped S=$1
B=benchmarks/results/gemma/rank_step/smollm2_val; [ "$S" = 1 ] || B=${B}_seed$S
benchmarks/scale/batch_row.sh $D/smollm2-many-neutral.yaml val 1000 "$S" $D/smollm2_neutral/val \
  "$B/seed_$S/*.json" $D/rows_smollm2_neutral_val_seed${S}_n1000.md
