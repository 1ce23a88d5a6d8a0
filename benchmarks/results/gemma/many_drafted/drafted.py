"""Issue 48: a retain set drafted from the facts alone (the corpus draft of b14d8c1) for Gemma's --many at n = 1,000.

  python benchmarks/results/gemma/many_drafted/drafted.py facts DATA SEED OUT
      the known cases (bench-scale's own test) of bench-scale batch's draw for DATA (train|val), SEED, n = 1,000 as
      the facts file `retain-set --facts` reads ({"prompt", "subject", "answer"}); the draw is
      ``harness.scale_cases.sampled_cases``, as bench-scale's
  python benchmarks/results/gemma/many_drafted/drafted.py wrap DATA SEED DRAFTED OUT
      the drafted records less those that name a subject or prompt scored in the draw's 1,000 cases (forget,
      paraphrase, neighbourhood: the bench's disjointness check), as the retain file the YAML's retain_file reads;
      prints how many were dropped
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List

FILES = {
    "train": "../shared/data/counterfact/counterfact_easyedit_train_9484.json",
    "val": "../shared/data/counterfact/counterfact_easyedit_val_1919.json",
}
N = 1000


def _cases(data: str, seed: str) -> List:
    from zerounlearn_editor.data.datasets import load_cases
    from zerounlearn_editor.harness.scale_cases import sampled_cases

    cases, _ = sampled_cases(load_cases(FILES[data]), N, int(seed))
    return cases


def write_facts(data: str, seed: str, out: str) -> None:
    """The draw's known cases as facts to forget."""
    from zerounlearn_editor.evaluation.selection import KNOWN_MIN_ACCURACY, select_known_cases
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("gemma3-270m")
    known = select_known_cases(model, tok, _cases(data, seed), None, min_accuracy=KNOWN_MIN_ACCURACY)
    facts = [{"prompt": c.request["prompt"], "subject": c.request["subject"], "answer": c.request["ground_truth"]}
             for c in known]
    Path(out).write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    print(f"{len(known)} known cases of {data} seed {seed}, n = {N} -> {out}")


def wrap_drafted(data: str, seed: str, drafted: str, out: str) -> None:
    """The drafted records that pass the bench's disjointness check against the draw's cases."""
    from zerounlearn_editor.harness.bench_config import BenchConfigError
    from zerounlearn_editor.harness.retain_sets import check_retain_disjoint

    cases = _cases(data, seed)
    kept, dropped = [], 0
    for record in json.loads(Path(drafted).read_text(encoding="utf-8")):
        request = {"prompt": record["prompt"], "subject": record["subject"]}
        try:
            check_retain_disjoint([request], cases)
            kept.append(request)
        except BenchConfigError:
            dropped += 1
    print(f"drafted retain set: {len(kept) + dropped} records, {dropped} dropped for naming a scored subject or prompt")
    Path(out).write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    {"facts": write_facts, "wrap": wrap_drafted}[command](*arguments)
