#!/usr/bin/env bash
# Issue 48 (lost, RESULTS 12.35; the draft is not in the package since): run from a checkout of b14d8c1, which had it.
# gemma-3-270m-retain.yaml with a retain set drafted from the facts to forget alone: `zerounlearn retain-set`
# without --pool puts the names found most often near each answer in the built-in statistics corpus into the fact's
# prompt and keeps those that pass the model's known test with that answer (data/corpus_neighbours.py). The same YAML
# with no retain set (retain_nullspace_weight 0, the settings 12.33 calls med75_rep1) is not run here: its fresh rows
# are in a267c22/ (the first run of this script, whose corpus draft was the first version of the name extraction), its
# val rows are 12.33's.
#   bash benchmarks/results/gemma/retain_corpus/run.sh fresh SEEDS   # the cases of RESULTS 12.34's fresh check
#   bash benchmarks/results/gemma/retain_corpus/run.sh val SEEDS     # the val-known draws of 12.23 / 12.30 / 12.34
# The rule, written before any row was read: the draft is recommended where no pool exists if, over the fresh seeds
# 1-3, at most 15 of 150 are still answered, Spe >= 75% pooled (46 of 61) and PPL with BOS <= +3% on every draw.
# Drafted records whose subject or prompt appears in a scored prompt of the run are dropped before the edit (logged).
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/retain_corpus
set_name=$1; shift
case $set_name in
  fresh) KNOWN=benchmarks/results/gemma/retain_fresh/cf_train7000-8999_gemma_known.json
         IDS=benchmarks/results/gemma/retain_fresh/seed%s_n50.json ;;
  val)   KNOWN=benchmarks/results/gemma/measure/cf_val_gemma_known.json
         IDS=benchmarks/results/gemma/n50_retain_repair/val_seed%s_n50.json ;;
  *) echo "first argument: fresh or val" >&2; exit 2 ;;
esac
for seed in "$@"; do
  tag=${set_name}_seed${seed}; out=$D/${tag}_n50.json
  [ -f "$out" ] && continue
  ids=$(printf "$IDS" $seed)
  python benchmarks/gemma/drafted_retain.py facts "$ids" "$KNOWN" "$D/${tag}_facts.json"
  python -m zerounlearn_editor retain-set --facts $D/${tag}_facts.json --model gemma3-270m --seed $seed \
    --out $D/${tag}_retain.json > $D/${tag}_n50.log 2>&1
  python benchmarks/gemma/drafted_retain.py wrap "$ids" "$KNOWN" "$D/${tag}_retain.json" "$D/${tag}_from.json" \
    >> $D/${tag}_n50.log 2>&1
  nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-retain.yaml \
    --data-path $KNOWN --n 50 --seed $seed --retain-from $D/${tag}_from.json --ppl-tokens 4000 \
    --variant "retain_corpus:" --out $out.part >> $D/${tag}_n50.log 2>&1
  mv $out.part $out
done
