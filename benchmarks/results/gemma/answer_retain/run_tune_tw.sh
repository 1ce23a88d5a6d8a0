#!/usr/bin/env bash
# Issue 48 (RESULTS 12.30) TUNE: Gemma --many with the same-answer retain set on the CounterFact train file, seed 1,
# n = 1,000, at nullspace_text_weight 100 (the shipped file) / 300 / 1000, one bench-scale call (the key does not
# change the targets: computed once). The retain set is drawn from the seed's cases (seed_cases.py, make_retain.py).
set -euo pipefail
D=benchmarks/results/gemma/answer_retain S=1
FILE=../shared/data/counterfact/counterfact_easyedit_train_9484.json
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
R=retain_train_seed${S}_n1000_k10.json
[ -f $D/cases_train_seed$S.json ] || python $D/seed_cases.py train $S 1000 $D/cases_train_seed$S.json
[ -f $D/$R ] || nice -n 5 python $D/make_retain.py $D/cases_train_seed$S.json train $D/$R
ARGS=()
for V in w01 w01-tw300 w01-tw1000; do
  Y=$D/tune_train_s${S}_$V.yaml
  sed "s/RETAIN_FILE/$R/" $D/gemma-many-aretain-$V.yaml > $Y
  ARGS+=(--hparams $Y)
done
nice -n 5 zerounlearn bench-scale batch "${ARGS[@]}" --data $FILE --n 1000 --target-chunk 50 --seeds $S \
  --ppl-tokens 5000 -q --out $D/train1000
python benchmarks/results/gemma/answer_retain/pool_table.py \
  "tw100=$D/train1000/seed_1/answer_retain_tune_train_s1_w01_n1000.json" \
  "tw300=$D/train1000/seed_1/answer_retain_tune_train_s1_w01-tw300_n1000.json" \
  "tw1000=$D/train1000/seed_1/answer_retain_tune_train_s1_w01-tw1000_n1000.json" > $D/tune_tw_train_seed1_n1000.md
