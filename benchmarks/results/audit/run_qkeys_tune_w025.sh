#!/bin/bash
# issue 45 item 3, lever "forget keys read on an int4 copy": TUNE half, weight 0.25 (bench first, then int4 per
# channel).
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=/work/shared/data
W=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50-qkeys-int4-w025.yaml
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half tune --retain same-answer:10 \
    --out benchmarks/results/audit/qkeys_bench_tune_n40_w025 --seeds 1 --n 40 --methods rm-qk25 --retain-variant rm-qk25=$W
python benchmarks/deep/diagnose_forgotten.py --half tune --n 40 --seed 1 \
    --out benchmarks/results/audit/diagnosis_qkeys_tune_int4_w025 --parts int4 --scheme int4 --retain same-answer:10 \
    --retain-variant rm-qk25=$W
