"""``zerounlearn bench-scale batch|stream``: unlearning at scale (:mod:`zerounlearn_editor.bench.scale`)."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any


def _cmd(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench.config import parse_seeds
    from zerounlearn_editor.bench.scale import ScaleConfig, run_scale_batch, run_scale_stream
    from zerounlearn_editor.bench.speed_bench import parse_int_list

    config = ScaleConfig(
        hparams=list(args.hparams), data=args.data, data_path=args.data_path, seeds=parse_seeds(args.seeds),
        out=args.out, ns=parse_int_list(args.n), rounds=args.rounds, eval_every=args.eval_every,
        ppl_tokens=args.ppl_tokens, eval_batch_size=args.batch_size, known_min_accuracy=args.known_min_accuracy,
        target_chunk=args.target_chunk, device=args.device,
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
    )
    p.add_argument("mode", choices=["batch", "stream"])
    p.add_argument("--hparams", action="append", required=True, help="ZeroUnlearn(-GD) YAML (repeat for several)")
    p.add_argument("--data", required=True, help="dataset name (counterfact, ...) or a data file")
    p.add_argument("--data-path", default=None, help="with a dataset name: the file to read instead of the default")
    p.add_argument("--n", required=True, help="batch: comma list of batch sizes; stream: facts per round")
    p.add_argument("--rounds", type=int, default=1, help="stream: rounds (default 1)")
    p.add_argument("--eval-every", type=int, default=10,
                   help="stream: score every forgotten fact and PPL every K rounds and after the last (default 10)")
    p.add_argument("--seeds", default="1", help="e.g. 1-3 (default 1)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--ppl-tokens", type=int, default=20000, help="WikiText-2 tokens for perplexity (0 = off)")
    p.add_argument("--batch-size", type=int, default=32, help="probes per evaluation forward pass")
    p.add_argument("--known-min-accuracy", type=float, default=0.5,
                   help="unedited forget-prompt token accuracy that puts a case in the known subset (default 0.5)")
    p.add_argument("--target-chunk", type=int, default=50, help="batch: facts per cached target file (default 50)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd)
