#!/usr/bin/env bash
# Issue 48: SmolLM2's shipped -many.yaml with the rank-0 step selection on section 11's stream of 20 rounds x 50 known
# train facts (seed 2; not tuned on); the shipped row is section 11's (commit 66a7ebd), same facts, not rerun here.
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
D=benchmarks/results/gemma/rank_step
nice -n 5 zerounlearn bench-scale stream --hparams $D/smollm2-many-rank0.yaml \
  --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json --draw-known --n 50 --rounds 20 \
  --eval-every 10 --seeds 2 --ppl-tokens 5000 -q --out $D/smollm2_stream_20x50
