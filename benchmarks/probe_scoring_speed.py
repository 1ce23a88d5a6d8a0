"""Time :func:`~zerounlearn_editor.evaluation.metrics.evaluate_probes` with the output head at every position (a
forward without ``logits_to_keep``, as before) and only at the positions that predict an answer token, in one
process on one thread, alternating, on the same probes; checks both give the same scores.

    python benchmarks/probe_scoring_speed.py --model ~/.cache/zerounlearn_editor/models/gemma-3-270m \\
        --cases benchmarks/results/gemma/measure/cf_val_gemma_known.json --n 50 --repeats 2 --out out.json

The probes: each case's prompt, rephrase and locality prompt with its answer (what the bench scores per case).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Dict, List

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.metrics import evaluate_probes

LOG = logging.getLogger(__name__)


class EveryPositionLogits(torch.nn.Module):
    """The model behind a forward that takes no ``logits_to_keep``: its head runs at every position."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.inner = model

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=use_cache)


def case_probes(cases: List[Dict], n: int) -> List[Probe]:
    """Prompt, rephrase and locality probes of the first ``n`` cases."""
    probes = []
    for case in cases[:n]:
        probes.append(Probe(case["prompt"], case["ground_truth"]))
        probes.append(Probe(case["rephrase_prompt"], case["ground_truth"]))
        probes.append(Probe(case["locality_prompt"], case["locality_ground_truth"]))
    return probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--cases", required=True, help="EasyEdit-format CounterFact JSON list")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    path = os.path.expanduser(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    probes = case_probes(json.loads(Path(args.cases).read_text(encoding="utf-8")), args.n)
    runs: Dict[str, List[float]] = {"every_position": [], "answer_positions": []}
    scores = {}
    for _ in range(args.repeats):
        for name, scored in (("every_position", EveryPositionLogits(model)), ("answer_positions", model)):
            start = time.perf_counter()
            scores[name] = evaluate_probes(scored, tok, probes, args.batch_size)
            runs[name].append(time.perf_counter() - start)
            LOG.info("%s: %.1f s", name, runs[name][-1])
    same = (scores["every_position"]["pred_ids"] == scores["answer_positions"]["pred_ids"]
            and max(abs(a - b) for a, b in zip(scores["every_position"]["seq_prob"],
                                               scores["answer_positions"]["seq_prob"])) < 1e-5)
    result = {"model": path, "probes": len(probes), "batch_size": args.batch_size, "seconds": runs,
              "speedup": min(runs["every_position"]) / min(runs["answer_positions"]), "same_scores": same}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    LOG.info("%d probes: every position %.1f s, answer positions %.1f s (%.2fx); same scores: %s", len(probes),
             min(runs["every_position"]), min(runs["answer_positions"]), result["speedup"], same)


if __name__ == "__main__":
    main()
