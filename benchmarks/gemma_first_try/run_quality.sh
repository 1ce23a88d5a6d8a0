#!/bin/bash
# issue 48: the two n = 10 Gemma batches of RESULTS 12.2 with the rule YAML whose contexts come from the rule
set -x
cd "$(dirname "$0")/../.."
: "${ZEROUNLEARN_DATA_DIR:?set it to the data folder}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR
R=benchmarks/results/gemma/first_try
G=benchmarks/results/gemma/rules
mkdir -p $R
date -u
zerounlearn init-hparams --model ~/.cache/zerounlearn_editor/models/gemma-3-270m --method ZeroUnlearn-GD \
  --layers 3,4,5 --measure --out $R/gemma-rules-contexts.yaml --no-progress
date -u
zerounlearn bench --hparams $R/gemma-rules-contexts.yaml --data counterfact-easyedit \
  --data-path $G/cf_val_seed1_gemma_known10.json --known-only --n 10 --seeds 1 \
  --methods base,ZeroUnlearn-GD --ppl-tokens 4000 --out $R/bench_gemma_rules_contexts_n10 --no-progress
date -u
zerounlearn bench --hparams $R/gemma-rules-contexts.yaml --data counterfact-easyedit \
  --data-path $G/cf_val_first400_seed2_gemma_known10.json --known-only --n 10 --seeds 2 \
  --methods base,ZeroUnlearn-GD --ppl-tokens 4000 --out $R/bench_gemma_rules_contexts_n10_first400 --no-progress
date -u
echo CHAIN_B_DONE
