#!/usr/bin/env bash
# The tables of this folder's rows (run.sh), beside 12.32's same-answer retain rows on the same draws:
# table_train_seed1_n1000.md (TUNE) and table_val_n1000.md (REPORT, the seeds run so far; seed 4's "alone" row is
# 12.32's run_alone_repair.sh row, the same file and draw).
set -euo pipefail
D=benchmarks/results/gemma/many_drafted A=benchmarks/results/gemma/answer_retain
P="python $A/pool_table.py"
$P "alone=$D/train_alone/seed_1/many_drafted_gemma-many-alone-train1_n1000.json" \
   "drafted=$D/train_drafted/seed_1/many_drafted_gemma-many-drafted-train1_n1000.json" \
   "same-answer set (12.32)=$A/train1000_tw200-rep1/seed_1/answer_retain_run_train_s1_w01-tw200-rep1_n1000.json" \
   > $D/table_train_seed1_n1000.md
AL=() DR=() SA=()
for S in 1 2 3 4 5; do
  a=$D/val_alone/seed_$S/many_drafted_gemma-many-alone-val${S}_n1000.json
  [ $S = 4 ] && a=$A/val_alone-tw200-rep1/seed_4/answer_retain_gemma-many-alone-tw200-rep1_n1000.json
  d=$D/val_drafted/seed_$S/many_drafted_gemma-many-drafted-val${S}_n1000.json
  [ -f $a ] && [ -f $d ] || continue
  AL+=($a) DR+=($d) SA+=($A/val_tw200-rep1/seed_$S/answer_retain_run_val_s${S}_w01-tw200-rep1_n1000.json)
done
$P "alone=$(IFS=,; echo "${AL[*]}")" "drafted=$(IFS=,; echo "${DR[*]}")" \
   "same-answer set (12.32)=$(IFS=,; echo "${SA[*]}")" > $D/table_val_n1000.md
