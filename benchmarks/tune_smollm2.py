"""Tune ZeroUnlearn's solve weights on SmolLM2-135M-Instruct for a layer window.

The neutral targets depend only on the last edited layer, so they are optimised once per
window (``neutral_targets``) and every solve setting reuses them.

    python benchmarks/tune_smollm2.py --windows 15-17 --utility 3000,15000,100000
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from zerounlearn_editor import ZeroUnlearnHyperParams, apply_zerounlearn_to_model, restore_weights
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS, fact_requests
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
from zerounlearn_editor.support.resources import hparams_path


def _acc(model, tok, facts) -> float:
    return sum(evaluate_probes(model, tok, [Probe(p, a) for p, _, a in facts])["acc"]) / len(facts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="15-17")
    parser.add_argument("--utility", default="15000")
    parser.add_argument("--ppl-tokens", type=int, default=2000)
    parser.add_argument("--out", default="results/tune_smollm2.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    base = ZeroUnlearnHyperParams.from_hparams(hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct"))
    model, tok = load_model_and_tokenizer(base.model_name)
    wikitext = default_ppl_text()
    requests = fact_requests(CAPITALS_TO_FORGET)
    rows = []
    ppl0 = perplexity(model, tok, wikitext, max_tokens=args.ppl_tokens)
    for window in args.windows.split(","):
        a, b = (int(x) for x in window.split("-"))
        hp = base.replace(layers=list(range(a, b + 1)))
        stats = batched_statistics(model, tok, hp, hp.mom2_dataset)
        t0 = time.perf_counter()
        targets = neutral_targets(model, tok, requests, hp)
        target_seconds = time.perf_counter() - t0
        for u in (float(x) for x in args.utility.split(",")):
            hpu = hp.replace(utility_weight=u)
            model, weights = apply_zerounlearn_to_model(model, tok, requests, hpu, return_orig_weights=True,
                                                        second_moments=stats, targets=targets, progress=False)
            row = {"layers": hp.layers, "utility_weight": u,
                   "forget_acc": _acc(model, tok, CAPITALS_TO_FORGET),
                   "unrelated_acc": _acc(model, tok, UNRELATED_FACTS),
                   "other_capitals_acc": _acc(model, tok, OTHER_CAPITALS),
                   "ppl": perplexity(model, tok, wikitext, max_tokens=args.ppl_tokens), "ppl_base": ppl0,
                   "target_seconds": target_seconds}
            restore_weights(model, weights)
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
