#!/usr/bin/env bash
# The shipped gemma-3-270m-rules.yaml (text weight by key reach, 12.17) and the same YAML with the paper's null-space
# penalty (nullspace_text_weight: null) on 12.14-12.15's val-known draws, n = 50 and n = 10, seeds 1-3, perplexity on
# 4000 tokens read both ways (windows opening with BOS, and as tokenized: the layout of 12.14-12.15).
#   bash benchmarks/results/gemma/bos_ppl/run_rules.sh n50 1 2 3 | n10 1 2 3
# OUT=DIR PAPER=0 (RESULTS 12.30, seeds45/run_rules.sh): rows into DIR, the shipped variant only.
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=${OUT:-benchmarks/results/gemma/bos_ppl}
PAPER_VARIANT=(--variant "paper:nullspace_text_weight=null"); [ "${PAPER:-1}" = 1 ] || PAPER_VARIANT=()
VAL=benchmarks/results/gemma/measure/cf_val_gemma_known.json
stage=$1; shift
case $stage in n50) n=50 ;; n10) n=10 ;; *) echo "usage: $0 n50|n10 SEEDS..." >&2; exit 2 ;; esac
for seed in "$@"; do
  out=$D/rules_val_seed${seed}_n$n.json
  [ -f "$out" ] && continue
  nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
    --data-path $VAL --n $n --seed $seed --ppl-tokens 4000 \
    --variant "shipped:" "${PAPER_VARIANT[@]}" \
    --out $out.part > $D/rules_val_seed${seed}_n$n.log 2>&1
  mv $out.part $out
done
