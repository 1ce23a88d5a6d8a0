#!/usr/bin/env bash
# issue 48: SmolLM2 as unseen with the text weight by key reach that init-hparams now writes (RESULTS 12.17).
# 1. the YAML (--layers 1,2,3: the window 12.10's trace chose on facts20.json; the rules measured on the weights)
# 2. the bench on 12.10's known val cases, n = 10, seeds 1-3 (12.10's rows: benchmarks/results/smollm2_unseen/)
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/smollm2_unseen_reach
zerounlearn init-hparams --model smollm2 --method ZeroUnlearn-GD --layers 1,2,3 --measure --unseen \
    --out $D/smollm2-unseen-auto-kr06.yaml --no-progress > $D/init.log 2>&1
benchmarks/smollm2_unseen/run_bench.sh $D/smollm2-unseen-auto-kr06.yaml base,ZeroUnlearn-GD 10 1,2,3 \
    $D/bench_unseen_kr06_n10 > $D/bench_unseen_kr06_n10.log 2>&1
