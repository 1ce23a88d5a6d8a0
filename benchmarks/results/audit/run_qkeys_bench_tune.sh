#!/bin/bash
# issue 45 item 3, lever "forget keys read on an int4 copy": TUNE bench (Spe, PPL on 5,000 tokens, edit time),
# base, rm-r8 and rm-r8 + the lever in one run.
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=/work/shared/data
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half tune --retain same-answer:10 \
    --out benchmarks/results/audit/qkeys_bench_tune_n40 --seeds 1 --n 40 --methods base,rm-r8,rm-qk \
    --retain-variant rm-r8=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50.yaml \
    --retain-variant rm-qk=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50-qkeys-int4.yaml
