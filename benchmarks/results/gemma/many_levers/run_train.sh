#!/usr/bin/env bash
# Issue 48, RESULTS 12.16: the levers on TUNE data (train file, seed 1, n = 300), one run, rows in this order.
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/many_levers
nice -n 5 zerounlearn bench-scale batch \
  --hparams $D/gemma-many-th10x-tw100.yaml \
  --hparams $D/gemma-many-tw100-stop05.yaml \
  --hparams $D/gemma-many-tw100-stop20.yaml \
  --hparams $D/gemma-many-tw100-L2-8-stop05.yaml \
  --hparams $D/gemma-many-tw100-L2-8.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json --n 300 --target-chunk 50 \
  --seeds 1 --ppl-tokens 5000 -q --out $D/train
python benchmarks/scale/rows_table.py $D/train/seed_1/*.json > $D/train/rows_train_n300.md
