#!/usr/bin/env bash
# Issue 48 (RESULTS 12.32): Gemma --many at val n = 1,000 without a retain set, nullspace_text_weight 200 and one
# repair round (gemma-many-alone-tw200-rep1.yaml: the file as shipped after 12.32, used alone). The first edit reads
# 12.29's target cache (val/targets; the retain set and the two keys do not change its targets).
# Usage: run_alone_repair.sh SEED
set -euo pipefail
D=benchmarks/results/gemma/answer_retain S=$1 V=alone-tw200-rep1
FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
OUT=$D/val_$V
if [ ! -d $OUT/targets ]; then
  mkdir -p $OUT; T=$(mktemp -d $OUT/.targets.XXXX); cp -r $D/val/targets/. $T/
  mv -T $T $OUT/targets 2>/dev/null || rm -rf $T
fi
nice -n 5 zerounlearn bench-scale batch --hparams $D/gemma-many-$V.yaml --data $FILE --n 1000 --target-chunk 50 \
  --seeds $S --ppl-tokens 5000 --out $OUT
