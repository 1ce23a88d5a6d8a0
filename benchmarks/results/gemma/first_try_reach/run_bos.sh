#!/bin/bash
# issue 48 (RESULTS 12.17 read again with BOS, 12.23's scorer): run.sh's two edits of the first-try facts
# (facts20.json; the shipped gemma-3-270m-rules.yaml and the same file with the paper's penalty), perplexity on 4000
# tokens with every window opening with BOS (first_try.py's scorer since 12.23); one after the other, one thread.
cd "$(dirname "$0")/../../../.."
: "${ZEROUNLEARN_DATA_DIR:?set it to the data folder}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR
R=benchmarks/results/gemma/first_try_reach
M=~/.cache/zerounlearn_editor/models/gemma-3-270m
for v in reach paper; do
  Y=hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml; [ $v = paper ] && Y=$R/gemma-3-270m-rules-paper.yaml
  [ -f $R/first_try_${v}_bos.json ] && continue
  python benchmarks/gemma_first_try/first_try.py --model $M --hparams $Y --facts benchmarks/results/gemma/facts20.json \
    --siblings benchmarks/results/gemma/siblings20.json --ppl-tokens 4000 --out $R/first_try_${v}_bos.json \
    > $R/first_try_${v}_bos.log 2>&1
done
