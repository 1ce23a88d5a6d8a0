#!/bin/bash
# issue 45: the robust YAML's keys stage made faster without changing a number (the retain rows' passes stop at the
# key; the prefix replay advances with the edit, so each read starts at the layer edited before it).
# 0. The profile of a small robust edit (10 CounterFact facts, the next 80 prompts as retain set, targets cut to 2
#    steps) before (main fa6c7d8) and after, and the same edit with every read a full forward pass ("plain"): its
#    edited weights must equal the fast edit's bit for bit.
# 1. The REPORT half as step 1 of run_robust_bench.sh (base, the paper YAML, the robust YAML in one run), twice: every
#    metric and per-request score must equal robust_bench_report_n40/seed_1.json (compare_runs.py lists what differs
#    besides wall times: the robust config's hash, as the YAML's header comment changed after that run); the edit
#    seconds give the robust / paper ratio. (The runs of 2026-11-30 were started by hand with these commands, one
#    process at a time, under nice -n 5; the load average each minute: robust_speed_report_n40/load_average.log.)
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data}
R=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml
A=benchmarks/results/audit
P=$A/robust_speed_profile
if [ -n "$PROFILE" ]; then  # step 0 (the "before" profile ran on main's code: PYTHONPATH=<a checkout of fa6c7d8>)
    python $P/profile_keys.py $P/after_n10_r80 10 80
    python $P/profile_keys.py $P/plain_n10_r80 10 80 plain
    python $P/compare_weights.py $P/after_n10_r80_weights.json $P/plain_n10_r80_weights.json
fi
for OUT in robust_speed_report_n40 robust_speed_report_n40_run2; do  # twice: the ratio's spread under a shared load
    uptime
    python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half report --retain same-answer:10 \
        --out $A/$OUT --seeds 1 --n 40 --methods base,ZeroUnlearn-GD,robust \
        --retain-variant robust=$R
    uptime
    python $A/robust_speed_report_n40/compare_runs.py $A/robust_bench_report_n40/seed_1.json $A/$OUT/seed_1.json \
        > $A/$OUT/compare_vs_robust_bench_report_n40.txt || true
done
