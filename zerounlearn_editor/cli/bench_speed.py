"""``zerounlearn bench-speed``: time every edit stage, the batched pipeline vs the reference's per-request one."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.common import comma_list, config_from_args


def _cmd_bench_speed(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench.speed_bench import SpeedConfig, parse_int_list, run_speed

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


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``bench-speed`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "bench-speed",
        help="time every edit stage, our batched pipeline vs the reference's per-request structure",
        description="Per n, method and pipeline: one edit with cached statistics (stage times from EditReport), "
        "one evaluation pass over the forget prompts, peak memory; the statistics stage per pipeline and a "
        "one-pass/per-layer statistics micro-benchmark. Prints markdown tables, writes JSON.",
        parents=[parents.hparams("ZeroUnlearn or ZeroUnlearn-GD YAML; the other method's file of the same name is "
                                 "used for it (default: SmolLM2's, Llama-3.2-3B's with --random-config llama-3.2-3b)"),
                 parents.methods(None, default="ZeroUnlearn,ZeroUnlearn-GD"),
                 parents.data("dataset name or file (cases sampled with --seed)", default="counterfact"),
                 parents.seed(), parents.model(),
                 parents.device(default=None, help="default: cuda when available, else cpu"),
                 parents.corpus(), parents.batch_size(32, "probes per evaluation forward pass"),
                 parents.out(None, default="results/speed/speed.json"), parents.progress(), parents.data_dir()],
    )
    # a comma list of request counts, not one count: not the shared --n
    p.add_argument("--n", default="10,50,200,1000", help="comma list of request counts (default 10,50,200,1000)")
    p.add_argument("--pipeline", default="ours,per-request", help="comma list of ours, per-request")
    p.add_argument("--random-config", default=None, choices=["tiny", "llama-3.2-3b"],
                   help="random-weight Llama instead of --model (llama-3.2-3b: Llama-3.2-3B-Instruct's dims, bf16)")
    p.add_argument("--tokenizer", default="smollm2", help="tokenizer for --random-config (default: SmolLM2's)")
    p.add_argument("--stats-passages", type=int, default=None, help="passages for the statistics stage (default: mom2_n_samples)")
    p.add_argument("--micro-passages", type=int, default=300, help="passages for the statistics micro-benchmark (0 = skip)")
    p.add_argument("--layers", default=None, help="override the edited layers, e.g. 8,9,10")
    p.add_argument("--targets-optimizers", default=None, help="comma list of adam, adam_kv: one ours edit each "
                   "(the first is compared with per-request; default: the YAML's targets_optimizer)")
    p.set_defaults(func=_cmd_bench_speed)
