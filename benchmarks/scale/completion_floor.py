"""How much of a known fact's all-token Eff is word completion, not knowledge of the subject (issue 37).

For the known cases of a draw (forget-prompt token accuracy >= 0.5 on the unedited model), the answer is scored
teacher-forced under three prompts:

* ``prompt``: the forget prompt itself (the Eff the bench reports);
* ``other subject``: the same prompt with the subject replaced by the subject of another known case of the draw
  (so nothing about the forgotten subject is in the prompt);
* ``no prompt``: a fixed, subject-free prefix (``"Answer:"``).

Eff (all tokens) and Eff of the first token under each. What remains under ``other subject`` and ``no prompt`` is
the completion floor: the answer's later tokens follow from its first token (" Toy" -> "ota"), so an edit that
erases everything the model holds about the subject still leaves that part of the all-token Eff, unless it also
breaks the word's completion for every subject.

Usage (one torch thread, writes JSON and a small markdown table)::

    OMP_NUM_THREADS=1 python benchmarks/scale/completion_floor.py \
        --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 1000 --seed 1 \
        --out benchmarks/results/scale/completion_floor_val.json
"""
from __future__ import annotations

import argparse
import json
import logging
import random
from pathlib import Path
from statistics import fmean
from typing import Any, Dict, List, Tuple

import torch

from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.harness.case_scoring import score_cases
from zerounlearn_editor.harness.scale_metrics import known_mask
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("completion_floor")


def _rates(scores: Dict[str, List[float]]) -> Dict[str, float]:
    return {"eff": 100.0 * fmean(scores["acc"]), "eff_first": 100.0 * fmean(scores["first_acc"]),
            "eff_later": 100.0 * fmean(_later(scores))}


def _later(scores: Dict[str, List[float]]) -> List[float]:
    """Accuracy of the answer's tokens after the first, per probe with at least two tokens."""
    out = []
    for acc, first, n in zip(scores["acc"], scores["first_acc"], scores["n_tokens"]):
        if n > 1:
            out.append((acc * n - first) / (n - 1))
    return out or [0.0]


def known_draw(description: str) -> Tuple[argparse.Namespace, Any, Any, List[Any]]:
    """The command line shared by the scale probes (``--data --n --seed --model --out``), the model and the known
    cases of the draw (token accuracy >= 0.5 on the unedited model): ``(args, model, tok, known)``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(args.model, dtype="float32")
    cases = sample_cases(load_cases(args.data), args.n, args.seed)
    known = [c for c, k in zip(cases, known_mask(score_cases(model, tok, cases))) if k]
    return args, model, tok, known


def main() -> None:
    args, model, tok, known = known_draw(__doc__.split("\n")[0])
    rng = random.Random(args.seed)
    others = [c.request["subject"] for c in known]
    rng.shuffle(others)
    forget, swapped, bare = [], [], []
    for case, other in zip(known, others):
        req = case.request
        forget.append(Probe(req["prompt"], req["ground_truth"]))
        if other == req["subject"]:
            other = next(s for s in others if s != req["subject"])
        swapped.append(Probe(req["prompt"].replace(req["subject"], other), req["ground_truth"]))
        bare.append(Probe("Answer:", req["ground_truth"]))
    with torch.no_grad():
        rows = {name: _rates(evaluate_probes(model, tok, probes))
                for name, probes in (("prompt", forget), ("other subject", swapped), ("no prompt", bare))}
    multi = sum(1 for p in forget if len(tok(" " + p.answer.strip(), add_special_tokens=False)["input_ids"]) > 1)
    result = {"data": args.data, "n": args.n, "seed": args.seed, "known": len(known), "known_multi_token": multi,
              "rows": rows}
    write_json_atomic(Path(args.out), result)
    lines = ["| prompt | Eff | Eff first token | Eff later tokens |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['eff']:.1f} | {r['eff_first']:.1f} | {r['eff_later']:.1f} |" for name, r in rows.items()]
    LOG.info("known %d of %d (%d multi-token answers)\n%s", len(known), args.n, multi, "\n".join(lines))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
