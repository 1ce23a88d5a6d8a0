#!/bin/bash
# issue 48 (RESULTS 12.17): the first-try facts (facts20.json; the edit takes those Gemma answers) with the shipped
# gemma-3-270m-rules.yaml (text weight by key reach) and the same file with the paper's penalty; two processes side
# by side, one thread each.
cd "$(dirname "$0")/../../../.."
: "${ZEROUNLEARN_DATA_DIR:?set it to the data folder}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR
R=benchmarks/results/gemma/first_try_reach
M=~/.cache/zerounlearn_editor/models/gemma-3-270m
for v in reach paper; do
  Y=hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml; [ $v = paper ] && Y=$R/gemma-3-270m-rules-paper.yaml
  python benchmarks/gemma_first_try/first_try.py --model $M --hparams $Y --facts benchmarks/results/gemma/facts20.json \
    --siblings benchmarks/results/gemma/siblings20.json --ppl-tokens 4000 --out $R/first_try_$v.json > $R/first_try_$v.log 2>&1 &
done
wait
