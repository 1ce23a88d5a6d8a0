#!/usr/bin/env bash
# RESULTS 12.32: the repair round (run_repair.sh) beside 12.31's rows on the same cases, retain sets and targets.
# TUNE: train seed 1 (text weight 100 / 200 without repair, 200 with one round); REPORT: val seeds run so far;
# the file without a retain set on val seed 4 (run_alone_repair.sh).
set -euo pipefail
D=benchmarks/results/gemma/answer_retain
T=$D/train1000/seed_1/answer_retain_tune_train_s1_w01
python $D/pool_table.py "tw100=${T}_n1000.json" \
  "tw200=$D/train1000_tw200/seed_1/answer_retain_tune_train_s1_w01-tw200_n1000.json" \
  "tw200 + repair 1=$D/train1000_tw200-rep1/seed_1/answer_retain_run_train_s1_w01-tw200-rep1_n1000.json" \
  > $D/tune_repair_train_seed1_n1000.md
R=() W=() P=()
for S in 1 2 3 4 5; do
  F=$D/val_tw200-rep1/seed_$S/answer_retain_run_val_s${S}_w01-tw200-rep1_n1000.json
  [ -f $F ] || continue
  R+=($D/val/seed_$S/answer_retain_run_val_s${S}_w01_n1000.json)
  W+=($D/val_tw200/seed_$S/answer_retain_run_val_s${S}_w01-tw200_n1000.json)
  P+=($F)
done
python $D/pool_table.py "tw100=$(IFS=,; echo "${R[*]}")" "tw200=$(IFS=,; echo "${W[*]}")" \
  "tw200 + repair 1=$(IFS=,; echo "${P[*]}")" > $D/report_repair_val_n1000.md
A=$D/val_alone-tw200-rep1/seed_4/answer_retain_gemma-many-alone-tw200-rep1_n1000.json
if [ -f $A ]; then   # the file without a retain set, val seed 4 (run_alone_repair.sh 4) beside 12.30's row at 100
  python $D/pool_table.py "tw100=$D/val/seed_4/ZeroUnlearn-GD_gemma-3-270m-many_n1000.json" "tw200 + repair 1=$A" \
    > $D/alone_repair_val_n1000.md
fi
