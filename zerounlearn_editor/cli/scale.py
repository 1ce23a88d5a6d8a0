"""``zerounlearn bench-scale batch|stream``: unlearning at scale
(:mod:`zerounlearn_editor.harness.scale_batch`, :mod:`zerounlearn_editor.harness.scale_stream`)."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

STREAM_ONLY = ("rounds", "eval_every")
BATCH_ONLY = ("target_chunk",)


def _refuse_other_mode_options(args: argparse.Namespace) -> None:
    """A stream option given to ``batch`` (or the other way round) would be ignored: refuse it, naming it."""
    from zerounlearn_editor.harness.bench_config import BenchConfigError

    other = STREAM_ONLY if args.mode == "batch" else BATCH_ONLY
    given = ["--" + name.replace("_", "-") for name in other if getattr(args, name) is not None]
    if given:
        raise BenchConfigError(f"bench-scale {args.mode}: {', '.join(given)} is for "
                               f"{'stream' if args.mode == 'batch' else 'batch'} runs only")


def _cmd(args: argparse.Namespace) -> int:
    from zerounlearn_editor.harness.bench_config import parse_seeds
    from zerounlearn_editor.harness.scale_batch import run_scale_batch
    from zerounlearn_editor.harness.scale_config import ScaleConfig
    from zerounlearn_editor.harness.scale_stream import run_scale_stream

    _refuse_other_mode_options(args)
    given = {name: getattr(args, name) for name in STREAM_ONLY + BATCH_ONLY if getattr(args, name) is not None}
    config = ScaleConfig(
        hparams=list(args.hparams),
        data=args.data,
        data_path=args.data_path,
        seeds=parse_seeds(args.seeds),
        out=args.out,
        ns=args.n,
        ppl_tokens=args.ppl_tokens,
        eval_batch_size=args.batch_size,
        known_min_accuracy=args.known_threshold,
        ppl_text=args.ppl_text,
        known_only=args.draw_known,
        device=args.device,
        **given,  # the others keep ScaleConfig's defaults
    )
    if args.mode == "batch":
        summary = run_scale_batch(config)
    else:
        summary = run_scale_stream(config)
    print(summary["table_markdown"])
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``bench-scale`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "bench-scale",
        help="unlearning at scale: one batch of n = 200 ... 1000 facts, or a stream of R rounds x n facts",
        description="batch: per seed and YAML, one edit of the first n of max(n) drawn cases per n (targets of the "
        "unedited model optimised once, cached per chunk); stream: R rounds of n facts on the same model, the round-1 "
        "facts scored after every round. Eff, Eff first token, Gen, Spe, PPL, each also on the known subset; stage "
        "seconds and peak memory. Resumable: one JSON per row / per round.",
        parents=[parents.hparams("ZeroUnlearn(-GD) YAML (repeat for several)", action="append", required=True),
                 parents.data("dataset name (counterfact, ...) or a data file", required=True),
                 parents.seeds("e.g. 1-3 (default 1)", default="1"), parents.out("output folder", required=True),
                 parents.ppl(20000, "WikiText-2 tokens for perplexity (default 20000; 0 = off)"),
                 parents.batch_size(default=32), parents.device(), parents.quiet()],
    )
    p.add_argument("mode", choices=["batch", "stream"])
    p.add_argument("--n", required=True, type=parents.positive_int_list,
                   help="batch: comma list of batch sizes; stream: facts per round")
    p.add_argument("--rounds", type=parents.positive_int, default=None, help="stream: rounds (default 1)")
    p.add_argument("--eval-every", type=parents.positive_int, default=None,
                   help="stream: score every forgotten fact and PPL every K rounds and after the last (default 10)")
    p.add_argument("--known-threshold", type=float, default=0.5,
                   help="unedited forget-prompt token accuracy that puts a case in the known subset (default 0.5)")
    p.add_argument("--draw-known", action="store_true",
                   help="draw only facts the unedited model knows (forget-prompt accuracy >= --known-threshold)")
    p.add_argument("--target-chunk", type=parents.positive_int, default=None,
                   help="batch: facts per cached target file (default 50)")
    p.set_defaults(func=_cmd)
