#!/bin/bash
# issue 45: the robust YAML's PPL against its depth on the REPORT half (n = 40, seed 1, --retain same-answer:10: the
# cases and retain draw of robust_bench_report_n40, checked by --check). The TUNE half's split ("Where the robust
# YAML's perplexity cost comes from") found PPL <= +3% only at W + s dW with s <= 0.85, where the depth was gone;
# this asks the same on the facts the YAML was reported on. One process at a time, in this order:
# 1. scale: the edit once; W + s dW for s = 0.8 ... 1.0 (PPL on 5,000 tokens, Eff / Gen / Spe).
# 2. S = the largest s of step 1 with PPL <= +3% (written to scale_report/chosen_s.txt).
# 3. the REPORT audit (formats, MC, int4/int8, lens, 3-shot) of the robust edit and of the same edit scaled to
#    W + S (W' - W), in one run (the same plan), and the paired test.
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data}
A=benchmarks/results/audit
O=$A/robust_ppl_split/scale_report
R=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml
mkdir -p $O
[ -f $O/scale.json ] || python benchmarks/deep/ppl_split.py --phase scale --half report --scales 0.8,0.85,0.9,0.95,1.0 \
    --out $O --check $A/robust_bench_report_n40/seed_1.json > $O/scale.log 2>&1
S=$(python -c "
import json, sys
d = json.load(open('$O/scale.json'))
ok = [float(s) for s, row in d['scales'].items() if row['ppl'] <= 1.03 * d['base_ppl']]
print(f'{max(ok):.2f}' if ok else 'none')")
echo "$S" > $O/chosen_s.txt
[ "$S" = none ] && exit 0
T=$(echo "$S" | tr -d .)
P=$A/robust_s${T}_report_n40_probes
mkdir -p $P
python benchmarks/deep/audit_variants.py --half report --retain same-answer:10 --out $P --seeds 1 --n 40 \
    --methods robust,robust-s$T --retain-variant robust=$R --scaled-variant robust-s$T=$R@$S \
    --probes formats,choice,quantization,lens,in_context --shots 3 > $P/audit.log 2>&1
python benchmarks/audit/paired_items.py robust=$P/audit_seed_1.json robust-s$T=$P/audit_seed_1.json \
    > $P/paired_s${T}_vs_robust.txt
