#!/bin/bash
# issue 45 item 3, lever "forget keys read on an int4 copy": REPORT half (n = 40, seed 1), rm-r8 + the lever, with
# the §7 REPORT probes (same case ids, MC options, relearning facts and RTT split as lever2_report_n40_retain{,_robust}):
# the fast probes first, then the bench (Spe, PPL 5,000 tokens, edit time), then relearning and RTT.
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=/work/shared/data
QK=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50-qkeys-int4.yaml
python benchmarks/deep/audit_variants.py --half report --retain same-answer:10 \
    --out benchmarks/results/audit/qkeys_report_n40_probes --seeds 1 --n 40 --methods rm-qk --retain-variant rm-qk=$QK \
    --probes formats,choice,quantization,lens,in_context --shots 3
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half report --retain same-answer:10 \
    --out benchmarks/results/audit/qkeys_bench_report_n40 --seeds 1 --n 40 --methods base,rm-qk --retain-variant rm-qk=$QK
python benchmarks/deep/audit_variants.py --half report --retain same-answer:10 \
    --out benchmarks/results/audit/qkeys_report_n40_relearn --seeds 1 --n 40 --methods rm-qk --retain-variant rm-qk=$QK \
    --probes relearning,rtt --relearn-scopes mlp,full
