"""Choose SmolLM2-135M-Instruct's edited layers by measurement.

For each candidate window of consecutive layers, forget the 10 capitals of
``zerounlearn_editor.data.facts`` with ZeroUnlearn and measure: token accuracy of the forgotten
answers, of 20 unrelated facts and of 5 other capitals, and WikiText-2 perplexity. The
statistics of every candidate layer come from ONE pass over the corpus.

    python benchmarks/select_layers.py --out results/select_layers.json
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from zerounlearn_editor import EditReport, ZeroUnlearnHyperParams, apply_zerounlearn_to_model, restore_weights
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS, fact_requests
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.pipeline import batched_statistics
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
from zerounlearn_editor.support.resources import hparams_path


def _acc(model, tok, facts):
    scores = evaluate_probes(model, tok, [Probe(p, a) for p, _, a in facts])
    return sum(scores["acc"]) / len(facts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="2-4,5-7,8-10,11-13,14-16,17-19,20-22,23-25")
    parser.add_argument("--ppl-tokens", type=int, default=5000)
    parser.add_argument("--out", default="results/select_layers.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    base = ZeroUnlearnHyperParams.from_hparams(hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct"))
    model, tok = load_model_and_tokenizer(base.model_name)
    windows = [list(range(int(a), int(b) + 1)) for a, b in (w.split("-") for w in args.windows.split(","))]
    all_layers = sorted({l for w in windows for l in w})
    start = time.perf_counter()
    stats = batched_statistics(model, tok, base, base.mom2_dataset, layers=all_layers)
    stats_seconds = time.perf_counter() - start
    wikitext = default_ppl_text()
    logging.getLogger("zerounlearn_editor").setLevel(logging.INFO)
    rows = [{
        "layers": None,
        "forget_acc": _acc(model, tok, CAPITALS_TO_FORGET),
        "unrelated_acc": _acc(model, tok, UNRELATED_FACTS),
        "other_capitals_acc": _acc(model, tok, OTHER_CAPITALS),
        "ppl": perplexity(model, tok, wikitext, max_tokens=args.ppl_tokens),
    }]
    for window in windows:
        hp = base.replace(layers=window)
        t0 = time.perf_counter()
        report = EditReport()
        model, weights = apply_zerounlearn_to_model(
            model, tok, fact_requests(CAPITALS_TO_FORGET), hp, return_orig_weights=True,
            second_moments={l: stats[l] for l in window}, progress=False, report=report,
        )
        rows.append({
            "layers": window,
            "forget_acc": _acc(model, tok, CAPITALS_TO_FORGET),
            "unrelated_acc": _acc(model, tok, UNRELATED_FACTS),
            "other_capitals_acc": _acc(model, tok, OTHER_CAPITALS),
            "ppl": perplexity(model, tok, wikitext, max_tokens=args.ppl_tokens),
            "edit_seconds": time.perf_counter() - t0,
            "stage_seconds": report.timings,
            "target_steps": report.target_steps,
            "target_nll": report.target_nll,
        })
        restore_weights(model, weights)
        print(json.dumps(rows[-1]), flush=True)
    print(f"\nstatistics for {len(all_layers)} layers in one pass: {stats_seconds:.1f} s\n")
    print("| layers | forget acc | unrelated acc | other capitals acc | PPL |")
    print("|---|---|---|---|---|")
    for r in rows:
        name = "base" if r["layers"] is None else f"{r['layers'][0]}-{r['layers'][-1]}"
        print(
            f"| {name} | {r['forget_acc']:.2f} | {r['unrelated_acc']:.2f} | {r['other_capitals_acc']:.2f} | "
            f"{r['ppl']:.2f} |"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"stats_seconds": stats_seconds, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
