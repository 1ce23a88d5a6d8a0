#!/usr/bin/env bash
# Issue 48 (RESULTS 12.31) REPORT: Gemma --many at val n = 1,000 with the same-answer retain set (12.29's draw,
# retain_val_seed{S}_k10.json) at the nullspace_text_weight TUNE chose. The key does not change the targets, so
# each run reads 12.29's target cache (val/targets). Usage: run_report_tw.sh SEED WEIGHT
set -euo pipefail
D=benchmarks/results/gemma/answer_retain S=$1 W=$2
FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
R=retain_val_seed${S}_k10.json
[ -f $D/$R ] || { echo "missing $D/$R (run_seed.sh $S draws it)" >&2; exit 1; }
Y=$D/run_val_s${S}_w01-tw$W.yaml
sed "s/RETAIN_FILE/$R/" $D/gemma-many-aretain-w01-tw$W.yaml > $Y
OUT=$D/val_tw$W
if [ ! -d $OUT/targets ]; then  # a copy of the cache, moved in whole so that two seeds started together agree
  mkdir -p $OUT; T=$(mktemp -d $OUT/.targets.XXXX); cp -r $D/val/targets/. $T/
  mv -T $T $OUT/targets 2>/dev/null || rm -rf $T
fi
nice -n 5 zerounlearn bench-scale batch --hparams $Y --data $FILE --n 1000 --target-chunk 50 --seeds $S \
  --ppl-tokens 5000 -q --out $OUT
