#!/usr/bin/env bash
# SmolLM2 as unseen (issue 48): the shipped YAML against init-hparams --unseen YAMLs on the same known val cases.
# One process at a time; usage: run_bench.sh <row YAML for ZeroUnlearn-GD+R> <n> <seeds> <out folder>
# The +R row is only a second ZeroUnlearn-GD row here: no --retain, and the YAMLs have no retain keys.
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-/work/shared/data} OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/smollm2_unseen
zerounlearn bench --hparams hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml \
    --method-hparams "ZeroUnlearn-GD+R=$1" --data counterfact-easyedit --data-path $D/cf_val_smollm2_known.json \
    --known-only --n "$2" --seeds "$3" --methods base,ZeroUnlearn-GD,ZeroUnlearn-GD+R --ppl-tokens 4000 \
    --no-progress --out "$4"
