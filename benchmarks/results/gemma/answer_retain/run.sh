#!/usr/bin/env bash
# Issue 48 lever (RESULTS 12.29): Gemma --many with a same-answer retain set, one bench-scale call for the weights
# given (targets computed once, shared). Usage: [MODEL=smollm2] run.sh train|val SEED N BASELINE_ROW W [W ...]
#   W: 01 or 1 (retain_nullspace_weight 0.1 / 1.0; gemma-many-aretain-wW.yaml). The retain set is drawn from the
#   baseline row's cases (make_retain.py), so it names no subject the row scores. MODEL=smollm2: SmolLM2's
#   -many.yaml with the same retain rule (smollm2-many-aretain-w01.yaml), rows under smollm2_<data>/.
set -euo pipefail
D=benchmarks/results/gemma/answer_retain DATA=$1 S=$2 N=$3 BASE=$4; shift 4
case "$DATA" in
  train) FILE=../shared/data/counterfact/counterfact_easyedit_train_9484.json ;;
  val) FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json ;;
esac
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
M=${MODEL:-gemma} P=; [ "$M" = gemma ] || P=${M}_
R=${P}retain_${DATA}_seed${S}_k10.json
MODEL_NAME=gemma3-270m; [ "$M" = gemma ] || MODEL_NAME=$M
[ -f $D/$R ] || nice -n 5 python $D/make_retain.py $BASE $DATA $D/$R --model $MODEL_NAME
ARGS=()
for W in "$@"; do
  Y=$D/${P}run_${DATA}_s${S}_w$W.yaml
  sed "s/RETAIN_FILE/$R/" $D/$M-many-aretain-w$W.yaml > $Y
  ARGS+=(--hparams $Y)
done
nice -n 5 zerounlearn bench-scale batch "${ARGS[@]}" --data $FILE --n $N --target-chunk 50 --seeds $S --ppl-tokens 5000 \
  -q --out $D/$P$DATA
python benchmarks/scale/rows_table.py $BASE $D/$P$DATA/seed_$S/*.json > $D/${P}rows_${DATA}_seed${S}_n$N.md
