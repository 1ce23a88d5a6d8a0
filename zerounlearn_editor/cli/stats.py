"""``zerounlearn stats``: compute and cache C0 = E[k k^T] of every edited layer (optionally one shard of it);
``zerounlearn stats-merge``: sum the shard files into one statistics file."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.common import load_hparams


def parse_shard(text: str) -> tuple[int, int]:
    """``"RANK/WORLD"`` -> ``(rank, world)``."""
    try:
        rank, world = (int(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard must look like RANK/WORLD (e.g. 0/4), got {text!r}") from None
    if not 0 <= rank < world:
        raise SystemExit(f"--shard {text}: need 0 <= RANK < WORLD")
    return rank, world


def _cmd_stats(args: argparse.Namespace) -> int:
    from zerounlearn_editor.data.corpus import check_corpus_source
    from zerounlearn_editor.engine.stats import (
        StatsRequest,
        cached_second_moments,
        corpus_cache_name,
        model_basename,
        shard_path,
        stats_path,
    )
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    hparams = load_hparams(args.hparams)
    corpus = args.corpus or hparams.mom2_dataset
    n = args.n if args.n is not None else hparams.mom2_n_samples  # --n 0 is refused by the parser
    stats_dir = args.stats_dir or hparams.stats_dir
    shard = parse_shard(args.shard) if args.shard else None
    check_corpus_source(corpus)  # before the model is loaded
    model, tok = load_model_and_tokenizer(args.model or hparams.model_name, device=args.device)
    request = dataclasses.replace(StatsRequest.of_hparams(hparams, corpus), stats_dir=stats_dir, n_samples=n,
                                  force=args.force, shard=shard)
    for layer, stat in cached_second_moments(model, tok, request).items():
        path = stats_path(stats_dir, model_basename(model), corpus_cache_name(corpus),
                          hparams.rewrite_module_tmp.format(layer), hparams.mom2_dtype, n)
        if shard:
            print(f"layer {layer}: shard {args.shard} -> {shard_path(path, *shard)}")
        else:
            print(f"layer {layer}: {stat.count} tokens -> {path}")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``stats`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "stats", help="compute and cache C0 = E[k k^T] for every edited layer (one pass)",
        parents=[parents.hparams(None, required=True), parents.model(),
                 parents.corpus(".txt/.jsonl file, saved dataset folder or hub name"),
                 parents.n("passages (default: mom2_n_samples)", type=parents.positive_int),
                 parents.stats_dir(), parents.device()],
    )
    p.add_argument("--force", action="store_true", help="recompute even if cached")
    p.add_argument("--shard", default=None, metavar="RANK/WORLD",
                   help="collect only passages RANK::WORLD and write shard files next to the cache file "
                        "(merge them with stats-merge)")
    p.set_defaults(func=_cmd_stats)


def _cmd_stats_merge(args: argparse.Namespace) -> int:
    from zerounlearn_editor.engine.stats import merge_second_moment_files

    merged = merge_second_moment_files(Path(args.out), [Path(p) for p in args.shards])
    print(f"{len(args.shards)} shard(s), {merged.count} tokens, shape {tuple(merged.mom2.shape)} -> {args.out}")
    return 0


def register_merge(sub: Any, parents: ModuleType) -> None:
    """Add ``stats-merge`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`; none used)."""
    p = sub.add_parser("stats-merge", help="sum C0 shard files (mom2 and counts) into one statistics file",
                       description="Merge the .shard-R-of-W.npz files of `zerounlearn stats --shard` (or any files "
                       "of the same layout and corpus) into OUT, atomically, in EasyEdit's npz layout.")
    p.add_argument("out", help="merged file, e.g. the cache path without the .shard-R-of-W part")
    p.add_argument("shards", nargs="+", help="shard files")
    p.set_defaults(func=_cmd_stats_merge)
