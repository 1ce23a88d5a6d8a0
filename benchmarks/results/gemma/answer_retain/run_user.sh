#!/usr/bin/env bash
# Issue 48 (RESULTS 12.30): Gemma --many at val n = 1,000 with the retain set `zerounlearn retain-set` draws (k 10,
# pool: the CounterFact train file, only the facts the model knows served), minus the records that touch the seed's
# scored prompts (user_draw.py). Targets are 12.29's (cached in val/targets: same settings).  Usage: run_user.sh SEED
set -euo pipefail
D=benchmarks/results/gemma/answer_retain S=$1
FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
C=$D/cases_val_seed$S.json
[ -f $C ] || python $D/seed_cases.py val $S 1000 $C
[ -f $D/user_facts_val_seed$S.json ] || python $D/user_draw.py facts $C val $D/user_facts_val_seed$S.json
[ -f $D/user_raw_val_seed$S.json ] || nice -n 5 zerounlearn retain-set --facts $D/user_facts_val_seed$S.json \
  --pool ../shared/data/counterfact/counterfact_easyedit_train_9484.json --model gemma3-270m --k 10 \
  --out $D/user_raw_val_seed$S.json
R=user_retain_val_seed$S.json
[ -f $D/$R ] || python $D/user_draw.py filter $C val $D/user_raw_val_seed$S.json $D/$R
Y=$D/run_user_val_s${S}_w01.yaml
sed "s/RETAIN_FILE/$R/" $D/gemma-many-aretain-w01.yaml > $Y
nice -n 5 zerounlearn bench-scale batch --hparams $Y --data $FILE --n 1000 --target-chunk 50 --seeds $S \
  --ppl-tokens 5000 -q --out $D/val
