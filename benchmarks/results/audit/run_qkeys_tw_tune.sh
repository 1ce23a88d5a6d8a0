#!/bin/bash
# issue 45 item 3: rm-qk + the text-weighted null space (w 1 and 3) on the TUNE half: bench (Spe, PPL on 5,000 tokens),
# then per-channel int4 for both. rm-r8 / rm-qk rows: run_qkeys_bench_tune.sh, run_qkeys_tune.sh (same cases, retain draw).
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
L=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50-qkeys-int4
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half tune --retain same-answer:10 \
    --out benchmarks/results/audit/qkeys_tw_bench_tune_n40 --seeds 1 --n 40 --methods base,rm-qk-tw1,rm-qk-tw3 \
    --retain-variant rm-qk-tw1=$L-tw1.yaml --retain-variant rm-qk-tw3=$L-tw3.yaml
python benchmarks/deep/diagnose_forgotten.py --half tune --n 40 --seed 1 \
    --out benchmarks/results/audit/diagnosis_qkeys_tw_tune_int4 --parts int4 --scheme int4 --retain same-answer:10 \
    --retain-variant rm-qk-tw1=$L-tw1.yaml --retain-variant rm-qk-tw3=$L-tw3.yaml
