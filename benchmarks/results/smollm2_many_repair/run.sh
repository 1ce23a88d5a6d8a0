#!/usr/bin/env bash
# Issue 48 (left by RESULTS 12.32): SmolLM2-135M-Instruct's shipped -many.yaml with and without one repair round
# (repair_rounds: 1, the key Gemma's -many.yaml takes), CounterFact val, n = 1,000, one batch, same draw and targets.
#   bash benchmarks/results/smollm2_many_repair/run.sh SEED
set -euo pipefail
D=benchmarks/results/smollm2_many_repair S=$1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
cp hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-many.yaml $D/smollm2-many.yaml
{ grep -v '^repair_rounds:' hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-many.yaml; echo "repair_rounds: 1"; } \
  > $D/smollm2-many-rep1.yaml
nice -n ${NICE:-5} zerounlearn bench-scale batch --hparams $D/smollm2-many.yaml --hparams $D/smollm2-many-rep1.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 1000 --target-chunk 50 --seeds $S \
  --ppl-tokens 5000 -q --out $D/val
