#!/usr/bin/env bash
# Issue 48, RESULTS 12.16: per-fact diagnosis of the TUNE batch (train file, seed 1, n = 300) with the targets
# run_train.sh cached, and edits of subsets of its facts with the baseline YAML (known only; unknown-but-stepped only).
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/many_levers
nice -n 5 python $D/diagnose.py --hparams $D/gemma-many-th10x-tw100.yaml \
  --other-hparams $D/gemma-many-tw100-stop05.yaml --other-hparams $D/gemma-many-tw100-stop20.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json --n 300 --seed 1 \
  --targets $D/train --out $D/diagnose --subsets "${SUBSETS:-known,unknown_stepped}"
