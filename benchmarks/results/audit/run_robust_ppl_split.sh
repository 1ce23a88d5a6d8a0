#!/bin/bash
# issue 45: where the robust YAML's perplexity cost comes from (TUNE half, n = 40, seed 1, --retain same-answer:10:
# the cases and retain draw of robust_kr_bench_tune_n40, checked by --check). One process at a time, in this order;
# each ppl_split.py call makes its own edit (deterministic: the full edit's PPL is the bench's 35.1412 in each).
# 1. layers: the edit once; PPL (5,000 tokens, per token) with the full edit, each layer's change alone, each layer
#    left out, and W + 0.5 dW; per layer |dW|/|W| and tr(dW C0 dW^T)/tr(W C0 W^T); per fact |z - h| per layer.
# 2. subsets: two edits of 20 facts each with the whole retain set: the facts sharing an answer within the batch /
#    the others; then the 20 with the largest |z - h| at layer 12 (from step 1) / the others.
# 3. scale: the edit once; W + s dW for s = 0.5 ... 1.0 (PPL, Eff / Gen / Spe), and Eff / Gen / Spe with each layer
#    left out.
# 4. one lever on TUNE: the robust YAML on layers 12-17 (layer 18 left out and the edit re-solved), bench with base
#    (the robust row is robust_kr_bench_tune_n40's: same cases and retain draw, PPL deterministic).
# 5. step 1 for rm-r8 (the robust YAML without quantized_forget_keys, the int4-twin keys), its own edit.
# 6. what the last part of the edit buys: the TUNE audit (formats, MC, int4/int8, lens, 3-shot) of the robust edit and
#    of the same edit scaled to W + s (W' - W) (audit_variants.py --scaled-variant), s = 0.85 with robust in one run,
#    then s = 0.9 and 0.95 in a second run (same plan: the seed's); 7. the PPL at s = 0.95 (step 3 with --scales 0.95).
set -e
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data}
A=benchmarks/results/audit
O=$A/robust_ppl_split
C=$A/robust_kr_bench_tune_n40/seed_1.json
B=$A/robust_l12_17_bench_tune_n40
mkdir -p $O $O/rm_r8 $B
python benchmarks/deep/ppl_split.py --phase layers --half-scale --out $O --check $C > $O/layers.log 2>&1
python benchmarks/deep/ppl_split.py --phase subsets --split answer --out $O --check $C > $O/subsets_answer.log 2>&1
python benchmarks/deep/ppl_split.py --phase subsets --split residual --out $O --check $C > $O/subsets_residual.log 2>&1
python benchmarks/deep/ppl_split.py --phase scale --out $O --check $C > $O/scale.log 2>&1
python benchmarks/deep/audit_variants.py --bench --ppl-tokens 5000 --half tune --retain same-answer:10 \
    --out $B --seeds 1 --n 40 --methods base,robust-l12-17 \
    --retain-variant robust-l12-17=benchmarks/deep/levers/robust-l12-17.yaml > $B/bench.log 2>&1
python benchmarks/deep/ppl_split.py --phase layers --yaml benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50.yaml \
    --out $O/rm_r8 --check $C > $O/rm_r8/layers.log 2>&1
R=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml
P=$A/robust_s085_tune_n40_probes
mkdir -p $P $A/robust_s090_s095_tune_n40_probes
python benchmarks/deep/audit_variants.py --half tune --retain same-answer:10 --out $P --seeds 1 --n 40 \
    --methods robust,robust-s085 --retain-variant robust=$R --scaled-variant robust-s085=$R@0.85 \
    --probes formats,choice,quantization,lens,in_context --shots 3 > $P/audit.log 2>&1
python benchmarks/audit/paired_items.py robust=$P/audit_seed_1.json robust-s085=$P/audit_seed_1.json \
    > $P/paired_s085_vs_robust.txt
python benchmarks/deep/audit_variants.py --half tune --retain same-answer:10 --out $A/robust_s090_s095_tune_n40_probes \
    --seeds 1 --n 40 --methods robust-s090,robust-s095 --scaled-variant robust-s090=$R@0.9 \
    --scaled-variant robust-s095=$R@0.95 --probes formats,choice,quantization,lens,in_context --shots 3 \
    > $A/robust_s090_s095_tune_n40_probes/audit.log 2>&1
for S in 090 095; do
    python benchmarks/audit/paired_items.py robust=$P/audit_seed_1.json \
        robust-s$S=$A/robust_s090_s095_tune_n40_probes/audit_seed_1.json \
        > $A/robust_s090_s095_tune_n40_probes/paired_s${S}_vs_robust.txt
done
mkdir -p $O/scale095
python benchmarks/deep/ppl_split.py --phase scale --scales 0.95 --out $O/scale095 --check $C > $O/scale095/scale.log 2>&1
python benchmarks/deep/ppl_split_table.py $O > $O/tables.md
python benchmarks/deep/ppl_split_table.py $O/rm_r8 > $O/rm_r8/tables.md
