#!/usr/bin/env bash
# RESULTS 12.31: the tables of the text-weight TUNE (train seed 1, n = 1,000: 100 / 300 / 1000 from run_tune_tw.sh,
# 150 / 200 from run_tune_tw_mid.sh) and REPORT (val seeds 1-5 with the same-answer retain set: 100 is 12.29-12.30's
# rows, 200 run_report_tw.sh's), and retain-set's own draw (run_user.sh SEED) beside the bench's draw: seed 2, and
# every seed run (user_val_n1000.md).
set -euo pipefail
D=benchmarks/results/gemma/answer_retain
T=$D/train1000/seed_1/answer_retain_tune_train_s1_w01
python $D/pool_table.py "tw100=${T}_n1000.json" \
  "tw150=$D/train1000_tw150/seed_1/answer_retain_tune_train_s1_w01-tw150_n1000.json" \
  "tw200=$D/train1000_tw200/seed_1/answer_retain_tune_train_s1_w01-tw200_n1000.json" \
  "tw300=${T}-tw300_n1000.json" "tw1000=${T}-tw1000_n1000.json" > $D/tune_tw_mid_train_seed1_n1000.md
R=() W=()
for S in 1 2 3 4 5; do
  R+=($D/val/seed_$S/answer_retain_run_val_s${S}_w01_n1000.json)
  W+=($D/val_tw200/seed_$S/answer_retain_run_val_s${S}_w01-tw200_n1000.json)
done
python $D/pool_table.py "tw100=$(IFS=,; echo "${R[*]}")" "tw200=$(IFS=,; echo "${W[*]}")" > $D/report_tw200_val_n1000.md
python $D/pool_table.py "bench draw=$D/val/seed_2/answer_retain_run_val_s2_w01_n1000.json" \
  "retain-set draw=$D/val/seed_2/answer_retain_run_user_val_s2_w01_n1000.json" > $D/user_val_seed2_n1000.md
B=() U=()   # retain-set's draw against the bench's on every val seed that has both (run_user.sh SEED)
for S in 1 2 3 4 5; do
  [ -f $D/val/seed_$S/answer_retain_run_user_val_s${S}_w01_n1000.json ] || continue
  B+=($D/val/seed_$S/answer_retain_run_val_s${S}_w01_n1000.json)
  U+=($D/val/seed_$S/answer_retain_run_user_val_s${S}_w01_n1000.json)
done
python $D/pool_table.py "bench draw=$(IFS=,; echo "${B[*]}")" "retain-set draw=$(IFS=,; echo "${U[*]}")" \
  > $D/user_val_n1000.md
