"""ZeroUnlearn vs ZeroUnlearn-GD (exact and gd solvers) on CounterFact facts SmolLM2 knows.

Selects the first ``--n`` CounterFact records whose true answer the model predicts (base
token accuracy >= ``--min-accuracy``; SmolLM2 gets 219 of the 1919 EasyEdit-format records at
least half right, 80 fully), forgets them in ONE batch with each method, and reports
Efficacy / Generalization / Specificity (token accuracy x100 of the true answer on the forget
prompts, paraphrases and neighbourhood prompts), the same for the answer's first token only
(token accuracy keeps a floor for multi-token answers the model only half knows) and
WikiText-2 perplexity, before and after,
with the wall time of each stage. Key extraction and target optimisation are shared by the
methods (same unedited model, same requests), so the targets are optimised once.

    python benchmarks/unlearn_counterfact.py --n 200 --out results/unlearn_counterfact_200.json
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from statistics import mean

from zerounlearn_editor import (
    EditReport,
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
    restore_weights,
)
from zerounlearn_editor.data import load_cases
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets, target_settings
from zerounlearn_editor.evaluation import evaluate_probes, perplexity, select_known_cases
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
from zerounlearn_editor.support.resources import hparams_path

LOG = logging.getLogger("unlearn_counterfact")


def scores(model, tok, cases, ppl_tokens: int) -> dict:
    forget = evaluate_probes(model, tok, [p for c in cases for p in c.forget])
    paraphrase = evaluate_probes(model, tok, [p for c in cases for p in c.paraphrase])
    return {
        "efficacy": 100.0 * mean(forget["acc"]),
        "generalization": 100.0 * mean(paraphrase["acc"]),
        "specificity": 100.0 * mean(evaluate_probes(model, tok, [p for c in cases for p in c.neighbour])["acc"]),
        "efficacy_first_token": 100.0 * mean(forget["first_acc"]),
        "generalization_first_token": 100.0 * mean(paraphrase["first_acc"]),
        "ppl": perplexity(model, tok, default_ppl_text(), max_tokens=ppl_tokens),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument(
        "--data", default="counterfact-easyedit", help="counterfact (1129 records) or counterfact-easyedit (1919)"
    )
    parser.add_argument(
        "--min-accuracy", type=float, default=0.5, help="base token accuracy a record needs to be chosen"
    )
    parser.add_argument("--candidates", type=int, default=None)
    parser.add_argument("--ppl-tokens", type=int, default=20000)
    parser.add_argument("--methods", default="ZeroUnlearn,ZeroUnlearn-GD,ZeroUnlearn-GD(gd)")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--out", default="results/unlearn_counterfact.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    zu = ZeroUnlearnHyperParams.from_hparams(hparams_path("ZeroUnlearn", args.model))
    gd = ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", args.model))
    model, tok = load_model_and_tokenizer(zu.model_name)
    if target_settings(model, gd) != target_settings(model, zu):
        raise SystemExit(
            "the ZeroUnlearn and ZeroUnlearn-GD YAMLs differ in their target settings; targets cannot be shared"
        )
    timings = {}
    t0 = time.perf_counter()
    cases = select_known_cases(model, tok, load_cases(args.data)[: args.candidates], args.n, args.min_accuracy)
    timings["select_cases"] = time.perf_counter() - t0
    requests = [c.request for c in cases]
    t0 = time.perf_counter()
    stats = batched_statistics(model, tok, zu, zu.mom2_dataset)
    timings["statistics"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    base = scores(model, tok, cases, args.ppl_tokens)
    timings["evaluate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    targets = neutral_targets(model, tok, requests, zu)
    timings["targets (shared)"] = time.perf_counter() - t0
    LOG.info("targets: %.1f s, mean steps %.1f", timings["targets (shared)"], mean(targets.steps_run))

    methods = {
        "ZeroUnlearn": (apply_zerounlearn_to_model, zu),
        "ZeroUnlearn-GD": (apply_zerounlearn_gd_to_model, gd),
        "ZeroUnlearn-GD(gd)": (apply_zerounlearn_gd_to_model, gd.replace(solver="gd")),
    }
    rows = {"base": {**base, "stage_seconds": {}}}
    for name in args.methods.split(","):
        apply, hp = methods[name]
        report = EditReport()
        t0 = time.perf_counter()
        model, weights = apply(model, tok, requests, hp, return_orig_weights=True, second_moments=stats,
                               targets=targets, report=report, progress=False)
        edit_seconds = time.perf_counter() - t0
        rows[name] = {**scores(model, tok, cases, args.ppl_tokens), "edit_seconds": edit_seconds,
                      "stage_seconds": report.timings}
        restore_weights(model, weights)
        LOG.info("%s: %s", name, rows[name])

    lines = [
        f"{args.data}: {args.n} facts SmolLM2 knows (base accuracy >= {args.min_accuracy}), one batch; PPL on the "
        "first "
        f"{args.ppl_tokens} WikiText-2 tokens",
        "",
        "| method | Eff ↓ | Gen ↓ | Spe ↑ | Eff 1st ↓ | Gen 1st ↓ | PPL ↓ | edit s (targets shared) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['efficacy']:.1f} | {r['generalization']:.1f} | {r['specificity']:.1f} | "
                     f"{r['efficacy_first_token']:.1f} | {r['generalization_first_token']:.1f} | "
                     f"{r['ppl']:.2f} | {r.get('edit_seconds', 0.0):.1f} |")
    lines += ["", "Stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items())]
    for name, r in rows.items():
        if r["stage_seconds"]:
            lines.append(f"- {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["stage_seconds"].items()))
    print("\n".join(lines))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"n": args.n, "timings": timings, "rows": rows,
                                          "target_steps_mean": mean(targets.steps_run)}, indent=2))


if __name__ == "__main__":
    main()
