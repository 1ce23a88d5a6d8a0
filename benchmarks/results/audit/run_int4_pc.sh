#!/bin/bash
# issue 45 item 1: int4 per channel on the REPORT half (n = 40, seed 1), rm-r8 (retain-aware) and the paper YAML
# (the per-channel half of run_int4_diag.sh, rerun with the per-region reads; the edits cached under OUT/edits/).
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
OUT=benchmarks/results/audit/diagnosis_int4_report
python benchmarks/deep/diagnose_forgotten.py --half report --n 40 --seed 1 --out $OUT --parts int4 --scheme int4 \
    --retain same-answer:10 --retain-variant rm-r8=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50.yaml \
    --variant paper=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml
python benchmarks/deep/int4_recovered.py $OUT \
    --audit benchmarks/results/audit/lever2_report_n40_retain_robust/audit_seed_1.json rm-r8 int4:prompt
