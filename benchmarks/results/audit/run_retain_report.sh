#!/bin/bash
# issue 45 item 4 (README "Robustness": paper / deep / retain YAMLs): the shipped -retain.yaml
# (hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml) on the REPORT half (n = 40, seed 1, --retain
# same-answer:10) with the probes of the robust YAML's REPORT audit (run_qkeys_report.sh: same case ids, MC options,
# in-context examples, relearning facts and RTT split): the fast probes and relearning / RTT side by side (one thread
# each), then the bench (Spe, PPL 5,000 tokens, edit time) with the paper YAML in the same run.
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data}
R=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml
A=benchmarks/results/audit
mkdir -p $A/retain_report_n40_probes $A/retain_report_n40_relearn $A/retain_bench_report_n40
python benchmarks/deep/audit_variants.py --half report --retain same-answer:10 \
    --out $A/retain_report_n40_relearn --seeds 1 --n 40 --methods retain --retain-variant retain=$R \
    --probes relearning,rtt --relearn-scopes mlp,full > $A/retain_report_n40_relearn/audit.log 2>&1 &
python benchmarks/deep/audit_variants.py --half report --retain same-answer:10 \
    --out $A/retain_report_n40_probes --seeds 1 --n 40 --methods retain --retain-variant retain=$R \
    --probes formats,choice,quantization,lens,in_context --shots 3 > $A/retain_report_n40_probes/audit.log 2>&1
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half report --retain same-answer:10 \
    --out $A/retain_bench_report_n40 --seeds 1 --n 40 --methods base,ZeroUnlearn-GD,retain --retain-variant retain=$R \
    > $A/retain_bench_report_n40/bench.log 2>&1
wait
