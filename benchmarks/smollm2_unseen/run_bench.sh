#!/usr/bin/env bash
# SmolLM2 as unseen (issue 48): one YAML on the known val cases (the same cases for every YAML: same file, n, seeds).
# usage: run_bench.sh <YAML> <methods> <n> <seeds> <out folder>; one process at a time.
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/smollm2_unseen
zerounlearn bench --hparams "$1" --data counterfact-easyedit --data-path $D/cf_val_smollm2_known.json \
    --known-only --n "$3" --seeds "$4" --methods "$2" --ppl-tokens 4000 --no-progress --out "$5"
