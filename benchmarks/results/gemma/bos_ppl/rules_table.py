"""The rules YAML rows read both ways (RESULTS 12.23): per seed and variant, still answered, neighbour answers kept
(Spe as 12.13-12.15 count it: neighbour answers after over before), and the perplexity change with every window
opening with BOS and as tokenized; pooled over the seeds given.

    D=benchmarks/results/gemma/bos_ppl; python $D/rules_table.py $D/rules_val_seed{1,2,3}_n50.json
"""
from __future__ import annotations

import json
import sys
from typing import Dict, List


def neighbour_answers(per_case: List[Dict]) -> float:
    """Neighbour answers (the neighbour probes' first-token accuracies summed over cases)."""
    return sum(sum(row["neighbour_acc"]) for row in per_case)


def main(paths: List[str]) -> None:
    print("| seed | variant | still answered | neighbour answers kept (% of base) | PPL change, BOS windows | "
          "PPL change, as tokenized |")
    print("|---|---|---|---|---|---|")
    pooled: Dict[str, List[float]] = {}
    for path in paths:
        result = json.load(open(path, encoding="utf-8"))
        base = result["base"]
        before = neighbour_answers(result["per_case"])
        for name, variant in result["variants"].items():
            metrics = variant["metrics"]
            after = neighbour_answers(variant["per_case"])
            bos = 100 * (metrics["ppl"] / base["ppl"] - 1)
            tok = 100 * (metrics["ppl_as_tokenized"] / base["ppl_as_tokenized"] - 1)
            print(f"| {result['seed']} | {name} | {metrics['answered_first_token']} of {result['n']} | "
                  f"{after:.0f} of {before:.0f} ({100 * after / before:.0f}%) | {bos:+.1f}% | {tok:+.1f}% |")
            row = pooled.setdefault(name, [0, 0, 0, 0])
            row[0] += metrics["answered_first_token"]
            row[1] += result["n"]
            row[2] += after
            row[3] += before
    for name, (answered, n, after, before) in pooled.items():
        print(f"| pooled | {name} | {answered} of {n} ({100 * answered / n:.1f}%) | {after:.0f} of {before:.0f} "
              f"({100 * after / before:.0f}%) | | |")


if __name__ == "__main__":
    main(sys.argv[1:])
