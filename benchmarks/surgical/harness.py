"""Surgical-forgetting study: many solve variants on the same cases, retain sets and neutral targets.

Per seed: sample ``n`` cases the model knows (the bench's draw: ``sample_cases(known, n, seed)``, neighbour
probes another sampled case forgets dropped),
draw a retain set (``--retain siblings:K`` or ``same-answer:K``, same rules as ``zerounlearn bench``), optimise
the neutral targets once (cached as ``<out>/targets/seed_<k>_n<n>.npz``: every variant of a
method family shares them), then for every variant edit, score (Eff/Gen/Spe/PPL as the bench)
and restore. Results go to ``<out>/results.json`` after every variant (resumable: finished
(seed, variant) pairs are skipped) and a markdown table to ``<out>/summary.md``.

Variants come from a YAML file, a list of ``{name, hparams, overrides, retain}``: ``hparams`` a
ZeroUnlearn / ZeroUnlearn-GD YAML, ``overrides`` a mapping of keys to change (``hp.replace``),
``retain`` whether the seed's retain set is passed (the variant keys ``retain_k`` / ``retain_known`` were
retired: they kept fewer neighbours, see benchmarks/notebook/2026-11-23-surgical-tuning-waves.md). Example::

    OMP_NUM_THREADS=1 python benchmarks/surgical/harness.py --variants benchmarks/surgical/ablation.yaml \\
        --data counterfact --n 10 --seeds 1-3 --retain siblings:5 --out results/surgical/rome_n10

Targets depend only on the unedited model, the requests and the target settings, so every
variant with the same target settings (all shipped SmolLM2 YAMLs) reuses one optimisation.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
import yaml

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.engine.pipeline import (
    EditReport,
    batched_statistics,
    neutral_targets,
    restore_weights,
    target_settings,
)
from zerounlearn_editor.engine.targets import NeutralTargets
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.harness.bench_config import parse_seeds
from zerounlearn_editor.harness.case_scoring import ScoringSettings, model_metrics, probe_metrics, score_cases
from zerounlearn_editor.harness.method_specs import load_main_hparams
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours, neighbours_naming_forgotten_subjects
from zerounlearn_editor.harness.retain_sets import draw_retain, parse_retain_spec
from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("surgical")
METRICS = ("eff", "gen", "spe", "spe_distinct", "neighbours_named", "eff_first", "spe_prob", "spe_agree", "ppl")


def _targets(path: Path, model, tok, requests, hp, retain=None) -> NeutralTargets:
    settings = json.dumps(target_settings(model, hp), sort_keys=True)
    if path.is_file():
        with np.load(path, allow_pickle=False) as data:
            if str(data["settings"]) == settings:
                return NeutralTargets(
                    z=torch.from_numpy(data["z"]), h0=torch.from_numpy(data["h0"]),
                    nll=torch.from_numpy(data["nll"]), steps_run=data["steps"].tolist(),
                )
    start = time.perf_counter()
    targets = neutral_targets(model, tok, requests, hp, retain=retain)
    LOG.info(
        "targets for %d requests: %.1fs, mean NLL %.3f",
        len(requests),
        time.perf_counter() - start,
        float(targets.nll.mean()),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, z=targets.z.numpy(), h0=targets.h0.numpy(), nll=targets.nll.numpy(),
             steps=np.array(targets.steps_run), settings=np.array(settings))
    tmp.replace(path)
    return targets


VARIANT_KEYS = {"name", "hparams", "overrides", "retain"}
RETIRED_VARIANT_KEYS = {
    "retain_k": "another K per variant did not win on report data "
                "(benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); "
    "run the variant with --retain POLICY:K instead",
    "retain_known": "retain sets of known facts only kept fewer neighbours "
                    "(benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); "
    "drop the key",
}


def _known(out: Path, model, tok, pool, data: str, min_accuracy: float):
    cache = out / f"known_{data}_{min_accuracy}.json"
    if cache.is_file():
        ids = set(json.loads(cache.read_text()))
        return [c for c in pool if c.case_id in ids]
    known = select_known_cases(model, tok, pool, None, min_accuracy=min_accuracy)
    write_json_atomic(cache, [c.case_id for c in known])
    return known


def _summary(results: Dict[str, Any], names: List[str]) -> str:
    lines = ["| variant | " + " | ".join(METRICS) + " | retain | seeds |", "|---" * (len(METRICS) + 3) + "|"]
    for name in names:
        rows = [r[name] for r in results["seeds"].values() if name in r]
        if not rows:
            continue
        cells = []
        for key in METRICS:
            values = [r["metrics"][key] for r in rows if r["metrics"].get(key) is not None]
            if not values:
                cells.append("-")
                continue
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{mean:.2f} ± {std:.2f}" if key == "ppl" else f"{mean:.1f} ± {std:.1f}")
        retain = statistics.fmean(r.get("retain_count", 0) for r in rows)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {retain:.0f} | {len(rows)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", required=True, help="YAML list of {name, hparams, overrides, retain}")
    parser.add_argument("--data", default="counterfact-easyedit")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--retain", default="siblings:5", metavar="POLICY:K",
                        help="retain-set draw: siblings:K (K same-relation records per case) or same-answer:K "
                             "(records sharing the case's true answer first); see zerounlearn bench --help")
    parser.add_argument("--known-min-accuracy", type=float, default=1.0)
    parser.add_argument("--ppl-tokens", type=int, default=4000)
    parser.add_argument("--only", default=None, help="comma list of variant names to run (default all)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    variants = yaml.safe_load(Path(args.variants).read_text())
    if args.only:
        keep = set(args.only.split(","))
        variants = [v for v in variants if v["name"] in keep]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    run = {"data": args.data, "n": args.n, "retain": args.retain, "ppl_tokens": args.ppl_tokens,
           "known_min_accuracy": args.known_min_accuracy}
    results = json.loads(results_path.read_text()) if results_path.is_file() else {"run": run, "seeds": {}}
    if results["run"] != run:
        raise SystemExit(f"{results_path} holds another run ({results['run']}); use another --out")
    hps = {v["name"]: load_main_hparams(v["hparams"]).replace(**v.get("overrides", {})) for v in variants}
    draw = parse_retain_spec(args.retain)
    for v in variants:  # before any edit: a bad variant fails now, not hours into the run
        retired = sorted(set(v) & set(RETIRED_VARIANT_KEYS))
        if retired:
            raise SystemExit(
                f"variant {v['name']!r}: key(s) {retired} were retired: {RETIRED_VARIANT_KEYS[retired[0]]}"
            )
        unknown = sorted(set(v) - VARIANT_KEYS)
        if unknown:
            raise SystemExit(f"variant {v['name']!r}: unknown key(s) {unknown}; a variant has {sorted(VARIANT_KEYS)}")
        if v.get("retain") and not draw:
            raise SystemExit(f"variant {v['name']!r}: 'retain: true' needs a --retain policy")

    main_hp = next(iter(hps.values()))
    model, tok = load_model_and_tokenizer(str(main_hp.model_name))
    moments_by_setting: Dict[str, Any] = {}

    def moments_for(hp):
        """C0 of the variant's layers from its own statistics settings (a variant may change them)."""
        key = json.dumps([list(hp.layers), hp.rewrite_module_tmp, str(hp.mom2_dataset), hp.mom2_n_samples,
                          hp.mom2_dtype, hp.mom2_max_length])
        if key not in moments_by_setting:
            moments_by_setting[key] = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
        return moments_by_setting[key]

    pool = load_cases(args.data)
    known = _known(out, model, tok, pool, args.data, args.known_min_accuracy)
    LOG.info("%d of %d %s cases known (accuracy >= %g)", len(known), len(pool), args.data, args.known_min_accuracy)
    settings = ScoringSettings(32, str(default_ppl_text()), args.ppl_tokens)
    for seed in parse_seeds(args.seeds):
        cases, dropped = drop_batch_forget_neighbours(sample_cases(known, args.n, seed))
        if dropped:
            LOG.info("seed %d: %d neighbour probe(s) dropped (another sampled case forgets them)", seed, dropped)
        requests = [dict(c.request) for c in cases]
        retain = draw_retain(draw, cases, pool, seed) if draw else []
        record = results["seeds"].setdefault(str(seed), {})
        pre = score_cases(model, tok, cases)
        named = neighbours_naming_forgotten_subjects(cases)
        if "base" not in record or "spe_distinct" not in record["base"]["metrics"]:  # older files: re-score base
            record["base"] = {
                "metrics": dict(probe_metrics(pre, named=named), ppl=model_metrics(model, tok, cases, settings)["ppl"])
            }
        for variant in variants:
            name = variant["name"]
            if name in record:
                continue
            hp = hps[name]
            variant_retain = retain if variant.get("retain") else None
            key = hashlib.sha256(json.dumps(target_settings(model, hp), sort_keys=True).encode()).hexdigest()[:12]
            targets = _targets(out / "targets" / f"seed_{seed}_n{args.n}_{key}.npz", model, tok, requests, hp,
                               variant_retain)
            apply = apply_zerounlearn_to_model if hp.alg_name == "ZeroUnlearn" else apply_zerounlearn_gd_to_model
            report = EditReport()
            start = time.perf_counter()
            _, weights = apply(model, tok, requests, hp, return_orig_weights=True, second_moments=moments_for(hp),
                               targets=targets, progress=False, report=report,
                               retain=variant_retain)
            seconds = time.perf_counter() - start
            try:
                post = score_cases(model, tok, cases)
                metrics = dict(probe_metrics(post, pre, named), ppl=model_metrics(model, tok, cases, settings)["ppl"])
            finally:
                restore_weights(model, weights)
            record[name] = {"metrics": metrics, "seconds": seconds, "retain_count": report.retain_count,
                            "layer_change_norm": report.layer_change_norm}
            LOG.info(
                "seed %d %s: Eff %.1f Spe %.1f PPL %.2f", seed, name, metrics["eff"], metrics["spe"], metrics["ppl"]
            )
            write_json_atomic(results_path, results)
        write_json_atomic(results_path, results)
    table = _summary(results, ["base"] + [v["name"] for v in variants])
    (out / "summary.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
