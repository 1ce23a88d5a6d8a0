"""Time the target optimisation and the whole edit per fact on one model, in one process (peak RSS of that
process), with the cached target evaluation chosen as shipped or forced (issue 48, item 3).

``--path auto``: as shipped (``KVSuffix`` on Llama/Mistral/Qwen2/Qwen3/GPT-2, else ``LayerKV``); ``layer_kv``:
the model's own layers even where ``KVSuffix`` applies; ``full``: no cache (full forwards of the active rows, the
evaluation Gemma got before ``LayerKV``). The statistics (``C0``) are computed before the timed edit
(``--n-samples`` of them, into ``--stats-dir``): the timed part is what an edit with cached statistics costs.
``prefixes_s`` is the context-prefix sampling within ``targets_s``; ``--profile FILE`` writes cProfile's top
functions (cumulative time) of the target stage.

    python benchmarks/targets_speed.py --model ~/.cache/zerounlearn_editor/models/gemma-3-270m \\
        --hparams gemma.yaml --facts benchmarks/results/gemma/facts20.json --path auto --edit --out out.json
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import resource
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from zerounlearn_editor.applications.unlearn import load_facts
from zerounlearn_editor.engine.contexts import CONTEXT_SEED, context_prefixes
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.engine.targets.kv_suffix import KVSuffix
from zerounlearn_editor.engine.targets.layer_kv import LayerKV
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model


def _force(path: str) -> None:
    if path in ("layer_kv", "full"):
        KVSuffix.supported = staticmethod(lambda *a, **k: False)
    if path == "full":
        LayerKV.why_not = staticmethod(lambda *a, **k: "forced off (--path full)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--hparams", required=True, help="a ZeroUnlearn-GD YAML")
    parser.add_argument("--facts", required=True)
    parser.add_argument("--path", choices=("auto", "layer_kv", "full"), default="auto")
    parser.add_argument("--n-samples", type=int, default=200, help="statistics samples (computed before timing)")
    parser.add_argument("--stats-dir", default="data/stats")
    parser.add_argument("--steps", type=int, help="override v_num_grad_steps")
    parser.add_argument("--limit", type=int, help="only the first N facts")
    parser.add_argument("--edit", action="store_true", help="also time the whole edit (apply)")
    parser.add_argument("--profile", help="write cProfile's top functions of the target stage to this file")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    _force(args.path)
    model_dir = os.path.expanduser(args.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hp = ZeroUnlearnGDHyperParams.from_hparams(args.hparams).replace(
        mom2_n_samples=args.n_samples, stats_dir=args.stats_dir, model_name=model_dir)
    if args.steps is not None:
        hp = hp.replace(v_num_grad_steps=args.steps)
    facts = load_facts(args.facts)[: args.limit]
    row = dict(model=args.model, model_type=model.config.model_type, hparams=args.hparams, facts=args.facts,
               n_facts=len(facts), path=args.path, threads=torch.get_num_threads(), torch=torch.__version__,
               layers=list(hp.layers), contexts=hp.context_template_count, steps=hp.v_num_grad_steps)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    start = time.perf_counter()
    context_prefixes(model, tok, hp.context_template_count, hp.context_template_length, CONTEXT_SEED)
    row["prefixes_s"] = time.perf_counter() - start
    targets = neutral_targets(model, tok, facts, hp)  # on the prefixes just sampled (cached on the model)
    row["targets_s"] = time.perf_counter() - start
    if profiler:
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        Path(args.profile).write_text(text.getvalue(), encoding="utf-8")
    row["targets_s_per_fact"] = row["targets_s"] / len(facts)
    row["target_steps_mean"] = sum(targets.steps_run) / len(targets.steps_run)
    row["target_nll_mean"] = float(targets.nll.mean())
    if args.edit:
        start = time.perf_counter()
        batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
        row["statistics_s"] = time.perf_counter() - start
        start = time.perf_counter()
        apply_zerounlearn_gd_to_model(model, tok, facts, hp)
        row["edit_s"] = time.perf_counter() - start
        row["edit_s_per_fact"] = row["edit_s"] / len(facts)
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.out).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
