"""Issue 48 (RESULTS 12.30): the retain set `zerounlearn retain-set` itself draws, measured on a bench-scale seed.

12.29's figures are of the bench's same-answer draw (train-file facts, same relation first, same-relation fill-up,
every scored subject excluded). The shipped command has no fill-up and cannot see a benchmark's scored prompts. Here
its draw as a user gets it, for a val n = 1,000 seed's cases:

  facts   write the seed's cases as a facts file (prompt, subject, answer = true answer) for `retain-set --facts`;
  filter  drop from `retain-set`'s output every record that touches the seed's scored prompts (a retain record whose
          subject sits in a scored neighbourhood prompt would shield the very prompt Spe reads: a user's
          neighbours are not scored, a bench's are), log how many, and write the file the YAML names.

Usage (repository root):
  python benchmarks/results/gemma/answer_retain/user_draw.py facts CASES_JSON DATA OUT_FACTS
  python benchmarks/results/gemma/answer_retain/user_draw.py filter CASES_JSON DATA RETAIN_IN RETAIN_OUT
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from make_retain import row_cases  # this folder's script (run as a script, its folder is on sys.path)

from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint

LOG = logging.getLogger("user_draw")


def _touches(record, cases) -> bool:
    """True if the bench's leak test (``check_retain_disjoint``) refuses ``record`` against ``cases``."""
    try:
        check_retain_disjoint([record], cases)
    except BenchConfigError:
        return True
    return False


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stage, cases_json, data = sys.argv[1:4]
    cases = row_cases(json.loads(Path(cases_json).read_text(encoding="utf-8")), data)
    if stage == "facts":
        facts = [{"prompt": c.request["prompt"], "subject": c.request["subject"],
                  "answer": c.request["ground_truth"]} for c in cases]
        Path(sys.argv[4]).write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
        return
    records = json.loads(Path(sys.argv[4]).read_text(encoding="utf-8"))
    kept = [r for r in records if not _touches(r, cases)]
    check_retain_disjoint(kept, cases)
    Path(sys.argv[5]).write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    LOG.info("%d of %d retain-set records kept; %d touch a scored prompt and were dropped -> %s",
             len(kept), len(records), len(records) - len(kept), sys.argv[5])


if __name__ == "__main__":
    main()
