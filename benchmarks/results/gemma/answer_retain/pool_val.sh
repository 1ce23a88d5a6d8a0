#!/usr/bin/env bash
# RESULTS 12.30: the five val n = 1,000 draws of Gemma --many, the file alone and with the same-answer retain set
# (seeds 1-3: 12.24's and 12.29's rows; 4-5: run_seed.sh), per seed and pooled -> pool_val_n1000.md
set -euo pipefail
D=benchmarks/results/gemma/answer_retain G=benchmarks/results/gemma
FILE=$G/target_size/rule/val/seed_1/target_size_gemma-many-rule_n1000.json
FILE=$FILE,$G/target_size/rule/val/seed_2/target_size_gemma-many-rule_n1000.json
FILE=$FILE,$G/target_size/shipped_seed3/val/seed_3/ZeroUnlearn-GD_gemma-3-270m-many_n1000.json
RET=$D/val/seed_1/answer_retain_run_val_s1_w01_n1000.json
for S in 2 3 4 5; do RET=$RET,$D/val/seed_$S/answer_retain_run_val_s${S}_w01_n1000.json; done
for S in 4 5; do FILE=$FILE,$D/val/seed_$S/ZeroUnlearn-GD_gemma-3-270m-many_n1000.json; done
python $D/pool_table.py "file=$FILE" "retain=$RET" > $D/pool_val_n1000.md
python $D/pool_table.py "bench draw=$D/val/seed_1/answer_retain_run_val_s1_w01_n1000.json" \
  "retain-set draw=$D/val/seed_1/answer_retain_run_user_val_s1_w01_n1000.json" > $D/user_val_seed1_n1000.md
