#!/bin/bash
# issue 48 first try: init-hparams --layers auto on Gemma, then the one-batch edits of Gemma and SmolLM2
set -x
cd "$(dirname "$0")/../.."
: "${ZEROUNLEARN_DATA_DIR:?set it to the data folder}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR
R=benchmarks/results/gemma/first_try
mkdir -p $R
date -u
/usr/bin/time -v zerounlearn init-hparams --model gemma3-270m --method ZeroUnlearn-GD --layers auto \
  --facts benchmarks/results/gemma/facts20.json --out $R/gemma-first-try.yaml --no-progress
date -u
/usr/bin/time -v python benchmarks/gemma_first_try/first_try.py --model ~/.cache/zerounlearn_editor/models/gemma-3-270m \
  --hparams $R/gemma-first-try.yaml --facts benchmarks/results/gemma/facts20.json \
  --siblings benchmarks/results/gemma/siblings20.json --ppl-tokens 1000 --out $R/gemma_first_try.json
date -u
/usr/bin/time -v python benchmarks/gemma_first_try/first_try.py --model ~/.cache/zerounlearn_editor/models/SmolLM2-135M-Instruct \
  --hparams hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml --facts benchmarks/results/gemma/facts20.json \
  --siblings benchmarks/results/gemma/siblings20.json --out $R/smollm2_first_try.json
date -u
echo CHAIN_A_DONE
