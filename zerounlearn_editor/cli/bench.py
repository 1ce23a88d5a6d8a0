"""``zerounlearn bench``: the paper's table (Eff/Gen/Spe/PPL, mean ± std over seeds) for every method;
``zerounlearn bench-speed``: every edit stage timed, batched pipeline vs the reference's per-request one."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.audit import add_probe_options, refuse_unused_probe_options, settings_from_args
from zerounlearn_editor.cli.common import comma_list, comma_option, config_from_args
from zerounlearn_editor.harness.bench_config import default_methods, default_round_methods
from zerounlearn_editor.methods.registry import method_names


def _cmd_bench(args: argparse.Namespace) -> int:
    from zerounlearn_editor.harness import BenchConfig, parse_method_hparams, parse_seeds, run_bench, run_runfile
    from zerounlearn_editor.harness.bench_config import DEFAULT_PPL_TOKENS

    if not args.audit:
        refuse_unused_probe_options(args, "audit-", "--audit")
    if args.rounds is not None and args.runfile:
        raise SystemExit("zerounlearn bench: --rounds cannot be combined with --runfile")
    if args.audit and (args.runfile or args.rounds is not None):
        raise SystemExit("zerounlearn bench: --audit scores one run; it cannot be combined with --runfile or --rounds")
    if args.runfile:
        given = [f"--{k.replace('_', '-')}" for k in ("hparams", "data", "out", "seeds", "methods", "n", "ppl_tokens")
                 if getattr(args, k) is not None]
        if given or args.method_hparams:
            raise SystemExit(
                "zerounlearn bench: --runfile takes its settings from the file; drop "
                f"{', '.join(given) or '--method-hparams'}"
            )
        summaries = run_runfile(args.runfile, progress=not (args.no_progress or args.quiet))
        for summary in summaries:
            print(f"## {summary['name']}\n\n{summary['table_markdown']}\n")
        return 0
    missing = [f"--{k}" for k in ("hparams", "data", "out") if getattr(args, k) is None]
    if missing:
        raise SystemExit(f"zerounlearn bench: {', '.join(missing)} required (or --runfile)")
    defaults = default_methods() if args.rounds is None else default_round_methods()
    config = config_from_args(
        BenchConfig, args, seeds=parse_seeds(args.seeds or "1-10"),
        methods=[m for m in (args.methods or ",".join(defaults)).split(",") if m.strip()],
        n=args.n if args.n is not None else 50,
        ppl_tokens=args.ppl_tokens if args.ppl_tokens is not None else DEFAULT_PPL_TOKENS,
        method_hparams=parse_method_hparams(args.method_hparams), eval_batch_size=args.batch_size,
        progress=not (args.no_progress or args.quiet),
        audit=settings_from_args(args, prefix="audit_") if args.audit else None,
    )
    if args.rounds is not None:
        from zerounlearn_editor.harness.rounds import run_rounds

        summary = run_rounds(config, args.rounds)
        print(summary["table_markdown"])
        if summary.get("plot"):
            print(f"plot: {summary['plot']}")
        return 0
    summary = run_bench(config)
    print(summary["table_markdown"])
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``bench`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "bench",
        help="the paper's table: Eff/Gen/Spe/PPL (mean ± std over seeds) for every method",
        description="Per seed, sample n cases, edit them as one batch with every method, evaluate, restore. "
        "Writes OUT/seed_<k>.json (resumable), OUT/summary.json and OUT/summary.md.",
        parents=[parents.hparams("main ZeroUnlearn(-GD) YAML: model, statistics, layers"),
                 parents.data("dataset name (counterfact, zsre, ...) or a data file"),
                 parents.n("cases per seed, edited as one batch (default 50)", type=parents.positive_int),
                 parents.seeds("e.g. 1-10 or 1,2,5 (default 1-10)"),
                 parents.methods(parents.bench_rows_help("comma list of") + "; default "
                                 + ",".join(default_methods())),
                 parents.method_hparams(), parents.out("output folder"),
                 parents.ppl(None, "WikiText-2 tokens for perplexity (default 20000; 0 = off)"),
                 parents.known(), parents.retain_policy(), parents.batch_size(default=32), parents.device(),
                 parents.progress(), parents.data_dir(), parents.dtype(), parents.quiet()],
    )
    p.add_argument(
        "--fluency", action="store_true", help="also n-gram entropy of greedy generations of the forget prompts"
    )
    p.add_argument("--fluency-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=None, metavar="R",
                   help="sequential unlearning: R rounds of --n facts each on the same model (default methods "
                        f"{','.join(default_round_methods())}); writes rounds.md, rounds_summary.json, "
                        "rounds.png")
    p.add_argument(
        "--utility",
        default=None,
        metavar="TASKS",
        help="also score downstream tasks (e.g. sst2,mmlu; see zerounlearn utility) as columns, accuracy x100",
    )
    p.add_argument("--utility-n", type=int, default=50, help="items per utility task (default 50)")
    p.add_argument("--group-generation", action="store_true",
                   help="data with probe groups (RWKU): also %% of each group's probes whose 16-token greedy "
                        "continuation contains the answer (columns FL1 gen ...)")
    p.add_argument("--audit", action="store_true", help="also the robustness audit's probes (zerounlearn audit) as "
                   "columns: %% of the forgotten facts each probe recovers")
    add_probe_options(p, prefix="audit-")
    p.add_argument(
        "--runfile", default=None, help="YAML with runs: [{name, hparams, data, n, seeds, methods, out, ppl_tokens}]"
    )
    p.set_defaults(func=_cmd_bench)


def _cmd_bench_speed(args: argparse.Namespace) -> int:
    from zerounlearn_editor.harness.speed_bench import SpeedConfig, parse_int_list, run_speed

    hparams = args.hparams or (
        "hparams/ZeroUnlearn/Llama-3.2-3B-Instruct.yaml" if args.random_config == "llama-3.2-3b"
        else "hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml"
    )
    config = config_from_args(
        SpeedConfig, args, hparams=hparams, ns=parse_int_list(args.n), methods=comma_list(args.methods),
        pipelines=comma_list(args.pipeline), layers=parse_int_list(args.layers) if args.layers else None,
        eval_batch_size=args.batch_size, progress=not (args.no_progress or args.quiet),
        targets_optimizers=comma_list(args.targets_optimizers) if args.targets_optimizers else None,
    )
    result = run_speed(config)
    print(result["markdown"])
    return 0


def register_speed(sub: Any, parents: ModuleType) -> None:
    """Add ``bench-speed`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "bench-speed",
        help="time every edit stage, our batched pipeline vs the reference's per-request structure",
        description="Per n, method and pipeline: one edit with cached statistics (stage times from EditReport), "
        "one evaluation pass over the forget prompts, peak memory; the statistics stage per pipeline and a "
        "one-pass/per-layer statistics micro-benchmark. Prints markdown tables, writes JSON.",
        parents=[parents.hparams(f"YAML of an editing method ({parents.editing_methods_text()}); the other "
                                 "methods' files of the same name are used for them (default: ZeroUnlearn's SmolLM2 "
                                 "file, Llama-3.2-3B's with --random-config llama-3.2-3b)"),
                 parents.methods(f"comma list of {parents.editing_methods_text()}",
                                 default=",".join(method_names())),
                 parents.data("dataset name or file (cases sampled with --seed)", default="counterfact"),
                 parents.seed(), parents.model(),
                 parents.device(default=None, help="default: cuda when available, else cpu"),
                 parents.corpus(), parents.batch_size("probes per evaluation forward pass", default=32),
                 parents.out(None, default="results/speed/speed.json"), parents.progress(), parents.data_dir()],
    )
    # a comma list of request counts, not one count: not the shared --n
    p.add_argument(
        "--n", type=comma_option, default="10,50,200,1000", help="comma list of request counts (default 10,50,200,1000)"
    )
    p.add_argument("--pipeline", type=comma_option, default="ours,per-request", help="comma list of ours, per-request")
    p.add_argument("--random-config", default=None, choices=["tiny", "llama-3.2-3b"],
                   help="random-weight Llama instead of --model (llama-3.2-3b: Llama-3.2-3B-Instruct's dims, bf16)")
    p.add_argument("--tokenizer", default="smollm2", help="tokenizer for --random-config (default: SmolLM2's)")
    p.add_argument(
        "--stats-passages", type=int, default=None, help="passages for the statistics stage (default: mom2_n_samples)"
    )
    p.add_argument(
        "--micro-passages", type=int, default=300, help="passages for the statistics micro-benchmark (0 = skip)"
    )
    p.add_argument("--layers", type=comma_option, default=None, help="override the edited layers, e.g. 8,9,10")
    p.add_argument(
        "--targets-optimizers",
        type=comma_option,
        default=None,
        help="comma list of adam, adam_kv: one ours edit each "
        "(the first is compared with per-request; default: the YAML's targets_optimizer)",
    )
    p.set_defaults(func=_cmd_bench_speed)
