#!/usr/bin/env bash
# One `bench-scale batch` row against a stored baseline row on the same cases, the way the issue-48 result folders
# record their runs: one torch thread, nice 5, targets in chunks of 50, PPL on 5000 tokens, then the two rows side
# by side (benchmarks/scale/rows_table.py).
# Usage (from the repository root): benchmarks/scale/batch_row.sh HPARAMS DATA N SEED OUT BASELINE_JSON TABLE
#   DATA: train or val (the CounterFact EasyEdit files under ../shared/data/counterfact);
#   BASELINE_JSON: the stored row (a path or a glob) compared against; TABLE: the table written (markdown).
set -euo pipefail
if [ "$#" -ne 7 ]; then
  echo "usage: $0 HPARAMS train|val N SEED OUT BASELINE_JSON TABLE" >&2
  exit 2
fi
HPARAMS=$1 DATA=$2 N=$3 SEED=$4 OUT=$5 BASELINE=$6 TABLE=$7
case "$DATA" in
  train) FILE=../shared/data/counterfact/counterfact_easyedit_train_9484.json ;;
  val) FILE=../shared/data/counterfact/counterfact_easyedit_val_1919.json ;;
  *) echo "$0: DATA must be train or val, got '$DATA'" >&2; exit 2 ;;
esac
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data
nice -n 5 zerounlearn bench-scale batch --hparams "$HPARAMS" --data "$FILE" --n "$N" --target-chunk 50 \
  --seeds "$SEED" --ppl-tokens 5000 -q --out "$OUT"
# shellcheck disable=SC2086  # BASELINE and the row may be globs
python benchmarks/scale/rows_table.py $BASELINE "$OUT"/seed_"$SEED"/*.json > "$TABLE"
