"""Sharded statistics (``zerounlearn stats --shard`` / ``stats-merge``): shard file names and their merge."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Sequence

from zerounlearn_editor.engine.stats.cache import SecondMoment, load_second_moment, save_second_moment

__all__ = ["shard_path", "merge_second_moment_files"]

LOG = logging.getLogger(__name__)


def shard_path(path: Path, rank: int, world_size: int) -> Path:
    """``..._mom2_{n}.npz`` -> ``..._mom2_{n}.shard-{rank}-of-{world_size}.npz`` (same folder)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.shard-{rank}-of-{world_size}{path.suffix}")


def merge_second_moment_files(out: Path, shards: Sequence[Path]) -> SecondMoment:
    """Sum shard files (``mom2`` and counts) into ``out`` and return it. The shards must agree in shape, dtype
    and recorded metadata and, when they carry shard metadata, be the distinct shards of one split, all
    present."""
    if not shards:
        raise ValueError("no shard files to merge")
    resolved = [Path(p).resolve() for p in shards]
    repeated = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    if repeated:
        raise ValueError(f"file(s) {repeated} given more than once: merging would count their tokens twice")
    loaded = [(Path(path), *load_second_moment(Path(path))) for path in shards]
    first_path, first, first_meta = loaded[0]
    for path, stat, meta in loaded[1:]:
        if stat.mom2.shape != first.mom2.shape:
            raise ValueError(
                f"{path}: shape {tuple(stat.mom2.shape)} differs from {first_path}'s {tuple(first.mom2.shape)}"
            )
        for key in ("dtype", "sample_size", "corpus_fingerprint", "max_length", "module", "model_fingerprint"):
            if meta.get(key) != first_meta.get(key):
                raise ValueError(f"{path}: {key} {meta.get(key)!r} differs from {first_path}'s {first_meta.get(key)!r}")
    modules = [meta.get("module") for _, _, meta in loaded]
    if len(loaded) > 1 and not all(modules):
        unknown = [str(p) for (p, _, m) in loaded if not m.get("module")]
        raise ValueError(
            f"cannot tell which module {unknown} hold (no zerounlearn.module metadata, e.g. EasyEdit's files): "
            "refusing to merge statistics that may be of different layers"
        )
    digests = [hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest() for p in resolved]
    same = sorted({str(p) for p, d in zip(resolved, digests) if digests.count(d) > 1})
    if same:
        raise ValueError(f"files {same} have identical contents: the same statistic twice, not shards of one")
    shard_ids = [meta.get("shard") for _, _, meta in loaded]
    if all(shard_ids):
        worlds = {s.split("/")[1] for s in shard_ids}
        if len(worlds) != 1:
            raise ValueError(f"shards of different splits: {sorted(set(shard_ids))}")
        world_size = int(worlds.pop())
        duplicates = sorted({s for s in shard_ids if shard_ids.count(s) > 1})
        if duplicates:
            raise ValueError(f"shard(s) {duplicates} given more than once")
        absent = sorted(set(range(world_size)) - {int(s.split("/")[0]) for s in shard_ids})
        if absent:
            raise ValueError(f"shard(s) {absent} of {world_size} missing")
    merged = first
    for _, stat, _ in loaded[1:]:
        merged = merged.merge(stat)
    meta = {k: v for k, v in first_meta.items() if k not in ("dtype", "shard", "sample_size", "n_passages")}
    passages = [m.get("n_passages") for _, _, m in loaded]
    if all(p is not None for p in passages):
        meta["n_passages"] = str(sum(int(p) for p in passages))
    sample_size = int(first_meta.get("sample_size", 0))
    save_second_moment(Path(out), merged, sample_size, first_meta["dtype"], meta)
    LOG.info("merged %d shard(s) (%d tokens) into %s", len(loaded), merged.count, out)
    return merged
