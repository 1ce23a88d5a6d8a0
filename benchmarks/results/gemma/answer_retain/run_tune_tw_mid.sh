#!/usr/bin/env bash
# Issue 48 (RESULTS 12.31) TUNE: as run_tune_tw.sh (train seed 1, n = 1,000, same-answer retain set), one
# nullspace_text_weight between the shipped 100 and 300 per call, so two run side by side on two cores.
# Usage: run_tune_tw_mid.sh 150|200. The targets do not depend on the key: each call starts from a copy of
# run_tune_tw.sh's target cache (train1000/targets) in its own output folder.
set -euo pipefail
D=benchmarks/results/gemma/answer_retain S=1 W=$1
FILE=../shared/data/counterfact/counterfact_easyedit_train_9484.json
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
R=retain_train_seed${S}_n1000_k10.json
OUT=$D/train1000_tw$W
mkdir -p $OUT
[ -d $OUT/targets ] || cp -r $D/train1000/targets $OUT/targets
Y=$D/tune_train_s${S}_w01-tw$W.yaml
sed "s/RETAIN_FILE/$R/" $D/gemma-many-aretain-w01-tw$W.yaml > $Y
nice -n 5 zerounlearn bench-scale batch --hparams $Y --data $FILE --n 1000 --target-chunk 50 --seeds $S \
  --ppl-tokens 5000 -q --out $OUT
