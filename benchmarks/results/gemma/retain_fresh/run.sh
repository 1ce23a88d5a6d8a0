#!/usr/bin/env bash
# Issue 48, after RESULTS 12.34: gemma-3-270m-retain.yaml and the rules YAML on facts no n = 50 / n = 10 run had
# drawn: CounterFact train records 7000-8999 that Gemma-3-270m knows (known_file.py, forget-prompt accuracy 1.0).
#   bash benchmarks/results/gemma/retain_fresh/run.sh known A B   # score records A..B-1 into $D/known_A_B.json
#   bash benchmarks/results/gemma/retain_fresh/run.sh merge       # $D/cf_train7000-8999_gemma_known.json, file order
#   bash benchmarks/results/gemma/retain_fresh/run.sh report SEEDS
# report: n = 50 per seed, retain same-answer:10 drawn from the same known file; variants retain_yaml (the shipped
# -retain.yaml) and rules_yaml (the same keys less the four the --retain rule adds: the rules YAML, no retain set).
set -euo pipefail
export ZEROUNLEARN_DATA_DIR=${ZEROUNLEARN_DATA_DIR:-../shared/data} PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=benchmarks/results/gemma/retain_fresh
KNOWN=$D/cf_train7000-8999_gemma_known.json
TRAIN=$ZEROUNLEARN_DATA_DIR/counterfact/counterfact_easyedit_train_9484.json
stage=$1; shift
case $stage in
  known)  # records $1..$2-1 of the train file
    nice -n ${NICE:-5} python benchmarks/gemma_measure/known_file.py --model gemma3-270m --data "$TRAIN" --start $1 \
      --stop $2 --out $D/known_$1_$2.json > $D/known_$1_$2.log 2>&1 ;;
  merge)
    python benchmarks/gemma_measure/known_file.py --merge $KNOWN $D/known_7000_8000.json $D/known_8000_9000.json ;;
  report)
    for seed in "$@"; do
      out=$D/seed${seed}_n50.json
      [ -f "$out" ] && continue
      nice -n ${NICE:-5} python benchmarks/gemma/layers_diag.py --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-retain.yaml \
        --data-path $KNOWN --n 50 --seed $seed --retain same-answer:10 --ppl-tokens 4000 --variant "retain_yaml:" \
        --variant "rules_yaml:retain_nullspace_weight=0,v_lr=8.29,v_num_grad_steps=25,repair_rounds=0" \
        --out $out.part > $D/seed${seed}_n50.log 2>&1
      mv $out.part $out
    done ;;
  *) echo "usage: $0 known A B | merge | report SEEDS..." >&2; exit 2 ;;
esac
