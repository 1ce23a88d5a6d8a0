#!/bin/bash
# issue 45 item 3: rm-qk + the text weight by key reach ({key_reach: 0.6}, RESULTS 12.14) on the TUNE half: bench
# (Spe, PPL on 5,000 tokens), then per-channel int4. rm-qk / w 1 / w 3 rows: run_qkeys_bench_tune.sh, run_qkeys_tw_tune.sh.
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
L=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50-qkeys-int4
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half tune --retain same-answer:10 \
    --out benchmarks/results/audit/qkeys_kr06_bench_tune_n40 --seeds 1 --n 40 --methods base,rm-qk-kr06 \
    --retain-variant rm-qk-kr06=$L-kr06.yaml
python benchmarks/deep/diagnose_forgotten.py --half tune --n 40 --seed 1 \
    --out benchmarks/results/audit/diagnosis_qkeys_kr06_tune_int4 --parts int4 --scheme int4 --retain same-answer:10 \
    --retain-variant rm-qk-kr06=$L-kr06.yaml
