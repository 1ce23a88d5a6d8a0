"""The case ids bench-scale batch draws for one seed (without the model), as a stub row that make_retain.py reads.

bench-scale's draw without --known-only is ``harness.scale_cases.sampled_cases`` (one case per prompt, cases in
another's neighbourhood dropped); this script calls it, so the retain set of a new seed can be drawn before the
seed's rows exist (make_retain.py then skips its known-count check).

Usage (repository root): python benchmarks/results/gemma/answer_retain/seed_cases.py DATA SEED N OUT
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from make_retain import FILES  # this folder's script (run as a script, its folder is on sys.path)

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.harness.scale_cases import sampled_cases


def main() -> None:
    data, seed, n, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    cases, _ = sampled_cases(load_cases(FILES[data]), n, seed)
    Path(out).write_text(json.dumps({"case_ids": [c.case_id for c in cases], "base": {"known_count": None}}) + "\n",
                         encoding="utf-8")


if __name__ == "__main__":
    main()
