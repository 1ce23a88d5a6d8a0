#!/bin/bash
# issue 48: the first-try facts (facts20.json; the edit takes those Gemma answers) with the shipped
# gemma-3-270m-rules.yaml (text weight by key reach) and the same file with the paper's penalty, one thread each.
#   run.sh        RESULTS 12.17: side by side -> first_try_{reach,paper}.json (read as tokenized by the code of then)
#   run.sh _bos   RESULTS 12.28: one after the other -> first_try_{reach,paper}_bos.json (first_try.py's scorer
#                 since 12.23: every perplexity window opens with BOS)
cd "$(dirname "$0")/../../../.."
: "${ZEROUNLEARN_DATA_DIR:?set it to the data folder}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR
R=benchmarks/results/gemma/first_try_reach
M=~/.cache/zerounlearn_editor/models/gemma-3-270m
SUFFIX=${1:-}
for v in reach paper; do
  Y=hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml; [ $v = paper ] && Y=$R/gemma-3-270m-rules-paper.yaml
  OUT=$R/first_try_$v$SUFFIX
  python benchmarks/gemma_first_try/first_try.py --model $M --hparams $Y --facts benchmarks/results/gemma/facts20.json \
    --siblings benchmarks/results/gemma/siblings20.json --ppl-tokens 4000 --out $OUT.json > $OUT.log 2>&1 &
  [ -n "$SUFFIX" ] && wait
done
wait
