#!/usr/bin/env bash
# Issue 48 (RESULTS 12.32): Gemma --many at n = 1,000 with the same-answer retain set, nullspace_text_weight 200 and
# one repair round (gemma-many-aretain-w01-tw200-rep1.yaml). train: TUNE (train seed 1, 12.30's retain set and
# target cache train1000/targets); val: REPORT (val seed S, 12.29-12.30's retain sets and target cache val/targets).
# The repair round reads its own targets; the first edit's targets are the cached ones (the key does not change them).
# Usage: run_repair.sh train|val SEED
set -euo pipefail
D=benchmarks/results/gemma/answer_retain SPLIT=$1 S=$2 V=tw200-rep1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
if [ "$SPLIT" = train ]; then
  FILE=../shared/data/counterfact/counterfact_easyedit_train_9484.json
  R=retain_train_seed${S}_n1000_k10.json CACHE=$D/train1000/targets OUT=$D/train1000_$V
else
  FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json
  R=retain_val_seed${S}_k10.json CACHE=$D/val/targets OUT=$D/val_$V
fi
[ -f $D/$R ] || { echo "missing $D/$R" >&2; exit 1; }
Y=$D/run_${SPLIT}_s${S}_w01-$V.yaml
sed "s/RETAIN_FILE/$R/" $D/gemma-many-aretain-w01-$V.yaml > $Y
if [ ! -d $OUT/targets ]; then  # a copy of the cache, moved in whole so that two seeds started together agree
  mkdir -p $OUT; T=$(mktemp -d $OUT/.targets.XXXX); cp -r $CACHE/. $T/
  mv -T $T $OUT/targets 2>/dev/null || rm -rf $T
fi
nice -n 5 zerounlearn bench-scale batch --hparams $Y --data $FILE --n 1000 --target-chunk 50 --seeds $S \
  --ppl-tokens 5000 --out $OUT
