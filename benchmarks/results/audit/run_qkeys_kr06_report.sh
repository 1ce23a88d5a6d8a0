#!/bin/bash
# issue 45 item 3: rm-qk + the text weight by key reach ({key_reach: 0.6}) on the REPORT half (n = 40, seed 1), the
# same case ids, retain draw, MC options, 3-shot examples, relearning facts and RTT split as run_qkeys_report.sh's rm-qk
# rows. Spe / PPL decide whether it can ship, so the bench comes first (base, the paper YAML and the candidate in one
# run: the edit-time ratio to the paper's is measured in one run), then the fast probes, then relearning and RTT.
# TUNE rows: run_qkeys_kr06_tune.sh.
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data}
KR=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50-qkeys-int4-kr06.yaml
A=benchmarks/results/audit
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half report --retain same-answer:10 \
    --out $A/qkeys_kr06_bench_report_n40 --seeds 1 --n 40 --methods base,ZeroUnlearn-GD,rm-qk-kr06 \
    --retain-variant rm-qk-kr06=$KR
python benchmarks/deep/audit_variants.py --half report --retain same-answer:10 \
    --out $A/qkeys_kr06_report_n40_probes --seeds 1 --n 40 --methods rm-qk-kr06 --retain-variant rm-qk-kr06=$KR \
    --probes formats,choice,quantization,lens,in_context --shots 3
python benchmarks/deep/audit_variants.py --half report --retain same-answer:10 \
    --out $A/qkeys_kr06_report_n40_relearn --seeds 1 --n 40 --methods rm-qk-kr06 --retain-variant rm-qk-kr06=$KR \
    --probes relearning,rtt --relearn-scopes mlp,full
