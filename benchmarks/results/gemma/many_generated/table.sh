#!/usr/bin/env bash
# The tables of this folder's rows (run.sh) beside the file alone (many_drafted/'s rows; seed 4: 12.32's), 12.36's
# corpus draft and 12.32's same-answer retain set on the same draws: table_train_seed1_n1000.md (TUNE) and
# table_val_n1000.md (REPORT, the seeds run so far).
set -euo pipefail
D=benchmarks/results/gemma/many_generated F=benchmarks/results/gemma/many_drafted A=benchmarks/results/gemma/answer_retain
P="python $A/pool_table.py"
$P "alone=$F/train_alone/seed_1/many_drafted_gemma-many-alone-train1_n1000.json" \
   "corpus draft (12.36)=$F/train_drafted/seed_1/many_drafted_gemma-many-drafted-train1_n1000.json" \
   "generated pool=$D/train_generated/seed_1/many_generated_gemma-many-generated-train1_n1000.json" \
   "same-answer set (12.32)=$A/train1000_tw200-rep1/seed_1/answer_retain_run_train_s1_w01-tw200-rep1_n1000.json" \
   > $D/table_train_seed1_n1000.md
AL=() DR=() GE=() SA=()
for S in 1 2 3 4 5; do
  a=$F/val_alone/seed_$S/many_drafted_gemma-many-alone-val${S}_n1000.json
  [ $S = 4 ] && a=$A/val_alone-tw200-rep1/seed_4/answer_retain_gemma-many-alone-tw200-rep1_n1000.json
  g=$D/val_generated/seed_$S/many_generated_gemma-many-generated-val${S}_n1000.json
  [ -f $g ] || continue
  AL+=($a) DR+=($F/val_drafted/seed_$S/many_drafted_gemma-many-drafted-val${S}_n1000.json) GE+=($g)
  SA+=($A/val_tw200-rep1/seed_$S/answer_retain_run_val_s${S}_w01-tw200-rep1_n1000.json)
done
$P "alone=$(IFS=,; echo "${AL[*]}")" "corpus draft (12.36)=$(IFS=,; echo "${DR[*]}")" \
   "generated pool=$(IFS=,; echo "${GE[*]}")" "same-answer set (12.32)=$(IFS=,; echo "${SA[*]}")" > $D/table_val_n1000.md
