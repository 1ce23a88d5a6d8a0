#!/usr/bin/env bash
# Issue 48 (RESULTS 12.30): Gemma --many at val n = 1,000 on a seed never run before, the shipped file without and
# with the same-answer retain set, in one bench-scale call (targets computed once, shared by both rows).
# Usage: run_seed.sh SEED. The retain set is drawn from the seed's cases before they are run (seed_cases.py).
set -euo pipefail
D=benchmarks/results/gemma/answer_retain S=$1
FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
R=retain_val_seed${S}_k10.json
[ -f $D/cases_val_seed$S.json ] || python $D/seed_cases.py val $S 1000 $D/cases_val_seed$S.json
[ -f $D/$R ] || nice -n 5 python $D/make_retain.py $D/cases_val_seed$S.json val $D/$R
Y=$D/run_val_s${S}_w01.yaml
sed "s/RETAIN_FILE/$R/" $D/gemma-many-aretain-w01.yaml > $Y
nice -n 5 zerounlearn bench-scale batch --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml --hparams $Y \
  --data $FILE --n 1000 --target-chunk 50 --seeds $S --ppl-tokens 5000 -q --out $D/val
python benchmarks/scale/rows_table.py $D/val/seed_$S/*gemma-3-270m-many_n1000.json $D/val/seed_$S/*w01_n1000.json \
  > $D/rows_val_seed${S}_n1000.md
