#!/bin/bash
# issue 45: the shipped robust YAML on a SECOND set of 40 known facts, disjoint from the TUNE and REPORT halves and
# never tuned on. The 80 cached known cases are all the known cases of the EasyEdit val file, so the set comes from the
# EasyEdit train file (same format, same "known" criterion): benchmarks/deep/second_known_set.py, seed 1 -> report2/
# known_train_seed1.json (+ .meta.json). The audits read that file as their data (--data TRAIN: the pool of borrowed
# facts, the retain draw and the relearning facts come from it) and audit its 40 ids (--cases).
# Order: (a) robust's fast probes, (b) robust's relearning + RTT, (c) the paper YAML's fast probes; the same flags as
# run_qkeys_report.sh's rm-qk rows (rm-qk = the robust YAML key for key). No bench here (another helper runs it).
# Then (d) the paper YAML's RTT split. STEP=a|b|c|d runs one step (default all).
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data}
R=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml
A=benchmarks/results/audit
O=$A/report2
TRAIN=$ZEROUNLEARN_DATA_DIR/counterfact/counterfact_easyedit_train_9484.json
C=$O/known_train_seed1.json
STEP=${STEP:-all}
[ -f $C ] || python benchmarks/deep/second_known_set.py --out $O/known_train_seed1 --seed 1
run() { echo "== $(date -u) $*"; uptime; "$@"; echo "== $(date -u) done"; uptime; }
if [ $STEP = all ] || [ $STEP = a ]; then
run python benchmarks/deep/audit_variants.py --data $TRAIN --cases $C --retain same-answer:10 \
    --out $O/robust_probes --seeds 1 --n 40 --methods robust --retain-variant robust=$R \
    --probes formats,choice,quantization,lens,in_context --shots 3
fi
if [ $STEP = all ] || [ $STEP = b ]; then
run python benchmarks/deep/audit_variants.py --data $TRAIN --cases $C --retain same-answer:10 \
    --out $O/robust_relearn --seeds 1 --n 40 --methods robust --retain-variant robust=$R \
    --probes relearning,rtt --relearn-scopes mlp,full
fi
if [ $STEP = all ] || [ $STEP = c ]; then
run python benchmarks/deep/audit_variants.py --data $TRAIN --cases $C --retain same-answer:10 \
    --out $O/paper_probes --seeds 1 --n 40 --methods ZeroUnlearn-GD \
    --probes formats,choice,quantization,lens,in_context --shots 3
fi
# d. (after a-c, time left before 14:00) the paper YAML's RTT split on the same set (no relearning family: time)
if [ $STEP = all ] || [ $STEP = d ]; then
run python benchmarks/deep/audit_variants.py --data $TRAIN --cases $C --retain same-answer:10 \
    --out $O/paper_rtt --seeds 1 --n 40 --methods ZeroUnlearn-GD \
    --probes rtt --relearn-scopes mlp,full
fi
if [ $STEP = all ] || [ $STEP = e ]; then  # Spe, PPL and the edit time on the second set (base, paper, robust in one run)
run python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --data $TRAIN --cases $C \
    --retain same-answer:10 --out $O/bench --seeds 1 --n 40 --methods base,ZeroUnlearn-GD,robust \
    --retain-variant robust=$R
fi
