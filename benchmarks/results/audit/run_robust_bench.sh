#!/bin/bash
# issue 45: the shipped robust YAML (hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml, rm-qk key for key with
# the two levers as top-level keys) measured itself.
# 1. REPORT half: base, the paper YAML and the robust YAML in one bench run: does the shipped file reproduce rm-qk's
#    REPORT row (qkeys_bench_report_n40), and the edit-time ratio to the paper's in one run.
# 2. TUNE half: a reach between rm-qk (no text weight) and {key_reach: 0.6}: the robust YAML + experimental
#    nullspace_text_weight {key_reach: 2.0} / {key_reach: 4.0} (benchmarks/deep/levers/robust-kr2.yaml, -kr4.yaml),
#    base and the three in one bench run. The log names the w the rule sets at layer 12 ("text weight ... set here").
# 3. TUNE probes that separated rm-qk from the 0.6 candidate on REPORT (3-shot in-context, the lens), for one reach
#    (KR below: neither reach met the TUNE goal of step 2, robust-kr2 has the lower PPL), then the robust YAML's on the
#    same TUNE facts for comparison (the same plan: in-context examples from the seed).
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data}
R=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml
L=benchmarks/deep/levers
A=benchmarks/results/audit
uptime
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half report --retain same-answer:10 \
    --out $A/robust_bench_report_n40 --seeds 1 --n 40 --methods base,ZeroUnlearn-GD,robust \
    --retain-variant robust=$R
uptime
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half tune --retain same-answer:10 \
    --out $A/robust_kr_bench_tune_n40 --seeds 1 --n 40 --methods base,robust,robust-kr2,robust-kr4 \
    --retain-variant robust=$R --retain-variant robust-kr2=$L/robust-kr2.yaml --retain-variant robust-kr4=$L/robust-kr4.yaml
KR=${KR:-robust-kr2}
python benchmarks/deep/audit_variants.py --half tune --retain same-answer:10 \
    --out $A/robust_kr_tune_n40_probes --seeds 1 --n 40 --methods $KR \
    --retain-variant $KR=$L/$KR.yaml --probes formats,in_context,lens --shots 3
python benchmarks/deep/audit_variants.py --half tune --retain same-answer:10 \
    --out $A/robust_tune_n40_probes --seeds 1 --n 40 --methods robust \
    --retain-variant robust=$R --probes formats,in_context,lens --shots 3
python benchmarks/audit/paired_items.py robust=$A/robust_tune_n40_probes/audit_seed_1.json \
    $KR=$A/robust_kr_tune_n40_probes/audit_seed_1.json > $A/robust_kr_tune_n40_probes/paired_vs_robust.txt
