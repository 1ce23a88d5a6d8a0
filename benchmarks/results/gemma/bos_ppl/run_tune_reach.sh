#!/usr/bin/env bash
# TUNE (train-known n = 50, seed 1; 12.14's tune cases): the rules YAML's key reach 0.6 against 0.7 and 0.8, the
# perplexity read with BOS windows (and as tokenized). Chosen here, reported on val seeds 1-3 (run_rules.sh's draws).
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/bos_ppl
nice -n 5 python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml \
  --data-path benchmarks/results/gemma/n50/cf_train700_gemma_known.json --n 50 --seed 1 --ppl-tokens 4000 \
  --variant "kr06:" --variant 'kr07:nullspace_text_weight={"key_reach":0.7}' \
  --variant 'kr08:nullspace_text_weight={"key_reach":0.8}' \
  --out $D/tune_train_seed1_n50.json > $D/tune_train_seed1_n50.log 2>&1
