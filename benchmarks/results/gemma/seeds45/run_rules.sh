#!/usr/bin/env bash
# Issue 48 (RESULTS 12.30): the shipped gemma-3-270m-rules.yaml (init-hparams' first try) on two val-known draws never
# run before (seeds 4 and 5; bos_ppl/run_rules.sh's pool and draw, the shipped variant only), n = 50 or 10,
# perplexity on 4000 tokens, windows opening with BOS. Usage: run_rules.sh n50|n10 SEEDS...
set -euo pipefail
OUT=benchmarks/results/gemma/seeds45 PAPER=0 bash benchmarks/results/gemma/bos_ppl/run_rules.sh "$@"
