#!/bin/bash
# issue 45 item 3, lever "forget keys read on an int4 copy": TUNE half (n = 40, seed 1), rm-r8 against rm-r8 + the
# lever; int4 per channel, then groups of 16 on the same cached edits (OUT/edits/), then the bench (Spe, PPL, time).
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=/work/shared/data
RM=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50.yaml
QK=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50-qkeys-int4.yaml
python benchmarks/deep/diagnose_forgotten.py --half tune --n 40 --seed 1 --out benchmarks/results/audit/diagnosis_qkeys_tune_int4 \
    --parts int4 --scheme int4 --retain same-answer:10 --retain-variant rm-r8=$RM --retain-variant rm-qk=$QK
mkdir -p benchmarks/results/audit/diagnosis_qkeys_tune_int4g16
cp -r benchmarks/results/audit/diagnosis_qkeys_tune_int4/edits benchmarks/results/audit/diagnosis_qkeys_tune_int4g16/
python benchmarks/deep/diagnose_forgotten.py --half tune --n 40 --seed 1 --out benchmarks/results/audit/diagnosis_qkeys_tune_int4g16 \
    --parts int4 --scheme int4g16 --retain same-answer:10 --retain-variant rm-r8=$RM --retain-variant rm-qk=$QK
