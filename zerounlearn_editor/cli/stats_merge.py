"""``zerounlearn stats-merge``: sum the C0 shard files of ``zerounlearn stats --shard`` into one statistics file."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any


def _cmd_stats_merge(args: argparse.Namespace) -> int:
    from zerounlearn_editor.engine.stats import merge_second_moment_files

    merged = merge_second_moment_files(Path(args.out), [Path(p) for p in args.shards])
    print(f"{len(args.shards)} shard(s), {merged.count} tokens, shape {tuple(merged.mom2.shape)} -> {args.out}")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``stats-merge`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`; none used)."""
    p = sub.add_parser("stats-merge", help="sum C0 shard files (mom2 and counts) into one statistics file",
                       description="Merge the .shard-R-of-W.npz files of `zerounlearn stats --shard` (or any files "
                       "of the same layout and corpus) into OUT, atomically, in EasyEdit's npz layout.")
    p.add_argument("out", help="merged file, e.g. the cache path without the .shard-R-of-W part")
    p.add_argument("shards", nargs="+", help="shard files")
    p.set_defaults(func=_cmd_stats_merge)
