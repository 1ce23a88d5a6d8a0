#!/usr/bin/env bash
# Issue 48: Gemma-3-270m --many at n = 1,000 (the shipped gemma-3-270m-many.yaml: text weight 200, one repair round)
# without a retain set ("alone") and with a retain set drafted from the facts alone ("drafted": `zerounlearn
# retain-set` without --pool, the corpus draft removed in 352b99d, run from a checkout of b14d8c1 given as DRAFT_TREE;
# the edit's code is unchanged since, only the command's option left).
#   DRAFT_TREE=/path/to/b14d8c1 bash benchmarks/results/gemma/many_drafted/run.sh alone|drafted train|val SEED
# The rule, written before any row was read (committed with this script):
#  TUNE (train seed 1): the draft goes to REPORT if, against "alone" on the same draw, it keeps >= 5 points more Spe
#  (% of base) with at most 1 of the known facts keeping its first token (Eff 1st token <= 2.0... of 91: 1 fact) and
#  PPL <= +3%.
#  REPORT (val seeds, "alone" and "drafted" on the same draws; seed 4's alone row is 12.32's): the draft is
#  recommended for --many where no pool exists (and the command option returns) if pooled Spe >= 75% with Eff 1st
#  token <= 2.0 and PPL <= +3% on every draw run.
set -euo pipefail
D=benchmarks/results/gemma/many_drafted V=$1 SPLIT=$2 S=$3
case $SPLIT in
  train) FILE=../shared/data/counterfact/counterfact_easyedit_train_9484.json ;;
  val) FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json ;;
  *) echo "second argument: train or val" >&2; exit 2 ;;
esac
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
Y=$D/gemma-many-$V-${SPLIT}$S.yaml
grep -v '^retain_file:' hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml > $Y
if [ "$V" = drafted ]; then
  T=${SPLIT}_seed$S
  [ -f $D/${T}_facts.json ] || python benchmarks/gemma/drafted_retain.py many-facts $SPLIT $S $D/${T}_facts.json
  if [ ! -f $D/${T}_drafted.json ]; then
    (cd "${DRAFT_TREE:?a checkout of b14d8c1}" && PYTHONPATH=$PWD python -m zerounlearn_editor retain-set \
      --facts $OLDPWD/$D/${T}_facts.json --model gemma3-270m --seed $S --out $OLDPWD/$D/${T}_drafted.json.part)
    mv $D/${T}_drafted.json.part $D/${T}_drafted.json
  fi
  [ -f $D/${T}_retain.json ] ||
    python benchmarks/gemma/drafted_retain.py many-wrap $SPLIT $S $D/${T}_drafted.json $D/${T}_retain.json
  echo "retain_file: ${T}_retain.json" >> $Y
else
  echo "retain_file: null" >> $Y
fi
nice -n ${NICE:-5} zerounlearn bench-scale batch --hparams $Y --data $FILE --n 1000 --target-chunk 50 --seeds $S \
  --ppl-tokens 5000 -q --out $D/${SPLIT}_$V
