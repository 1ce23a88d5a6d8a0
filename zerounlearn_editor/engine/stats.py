"""Utility statistic ``C0 = E[k k^T]`` of the edited modules' inputs over general text.

All edited layers are collected in one forward pass per batch. Results are cached in EasyEdit's layout
(``{stats_dir}/{model basename}/{ds_name}_stats/{module}_{dtype}_mom2_{n}.npz``, keys ``mom2.mom2`` = sum of
``k k^T`` ``[d_in, d_in]``, ``mom2.count`` = tokens, ``sample_size``) so EasyEdit's ROME/MEMIT/AlphaEdit read
the same file, plus ``zerounlearn.*`` metadata (corpus and model fingerprints, max length, module). A file
recording another model, corpus version, max length, module or shape is recomputed with a warning; an
unreadable one is treated as missing; EasyEdit's own files (no metadata) are read as they are. Files are
written atomically. Shards (``zerounlearn stats --shard`` / ``stats-merge``): :func:`layer_second_moments`
with ``shard`` writes the statistic of ``texts[rank::world_size]``, :func:`merge_second_moment_files` sums
shard files.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import socket
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from zerounlearn_editor.data.corpus import Corpus, load_corpus
from zerounlearn_editor.evaluation.batching import pad_sequences, pad_token_id
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.support.model_access import (
    StopForward,
    capture_inputs,
    check_edited_modules,
    get_module,
    get_weight_matrix,
    model_device,
    num_hidden_layers,
)
from zerounlearn_editor.support.files import write_atomic
from zerounlearn_editor.support.output_dir import existing_ancestor, pid_alive
from zerounlearn_editor.support.progress import progress_enabled

STATS_BATCH_SIZE = 16
"""Passages per forward pass of the statistics pass (``C0`` does not depend on it beyond float rounding)."""

LOG = logging.getLogger(__name__)
_NP_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
STALE_TEMP_SECONDS = 3600.0
"""A temp file older than this (or of a dead writer on this host) is removed by the next write."""


class StatsCacheError(ValueError):
    """A statistics cache file or folder cannot be used (the message names it)."""


# Config keys that do not change what a layer computes (names, versions, load dtype, runtime flags).
_CONFIG_IGNORED = {"_name_or_path", "name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures",
                   "use_cache", "output_attentions", "output_hidden_states", "return_dict"}


def model_fingerprint(model: nn.Module, skip_template: Optional[str] = None,
                      replace: Optional[Dict[str, torch.Tensor]] = None) -> str:
    """A short digest of what the model's statistics depend on (not its name).

    Hashes the config (without path, versions or load dtype) and, of every parameter, its name, shape and
    64 evenly spaced values rounded to bfloat16 (float32 and bfloat16 loads agree). The edited
    modules' weights (``skip_template``) are left out, so the edits of a sequence keep the statistic valid.
    ``replace`` (parameter name -> tensor) hashes those tensors instead, e.g. the weights before an edit.
    """
    config = getattr(model, "config", None)
    config_dict = config.to_dict() if hasattr(config, "to_dict") else {}
    config_dict = {k: v for k, v in config_dict.items() if k not in _CONFIG_IGNORED and not k.startswith("_")}
    digest = hashlib.blake2b(digest_size=12)
    digest.update(json.dumps(config_dict, sort_keys=True, default=str).encode())
    skipped = ({f"{skip_template.format(i)}.weight" for i in range(num_hidden_layers(model))}
               if skip_template else set())
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in skipped:
                continue
            if replace and name in replace:
                param = replace[name]
            flat = param.detach().reshape(-1)
            count = min(64, flat.numel())
            # integer spacing (a float32 linspace rounds past the end of a 28M-element tensor)
            index = torch.arange(count, dtype=torch.int64, device=flat.device) * (flat.numel() - 1) // max(count - 1, 1)
            sample = flat[index].to(torch.bfloat16).float().cpu().numpy()
            digest.update(f"{name}|{tuple(param.shape)}|".encode())
            digest.update(sample.tobytes())
    return digest.hexdigest()


def clean_stale_temp_files(folder: Path) -> None:
    """Remove the stale ``{file}.{host}.{pid}.XXXX.tmp`` statistics files of killed writers in ``folder`` (this
    host's writer no longer running, or older than :data:`STALE_TEMP_SECONDS`)."""
    host = socket.gethostname()
    now = time.time()
    for tmp in folder.glob("*_mom2_*.tmp"):
        parts = tmp.name.split(".")
        try:
            stale = now - tmp.stat().st_mtime > STALE_TEMP_SECONDS
        except FileNotFoundError:
            continue
        if not stale and len(parts) >= 4 and parts[-4] == host.replace(".", "_") and parts[-3].isdigit():
            stale = not pid_alive(int(parts[-3]))
        if stale:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                LOG.warning("removed stale temporary statistics file %s (left by an interrupted writer)", tmp)


@dataclass
class SecondMoment:
    """Running ``sum k k^T`` ``[d_in, d_in]`` (float64) over ``count`` tokens."""

    mom2: torch.Tensor
    count: int

    def moment(self) -> torch.Tensor:
        """``C0 = E[k k^T]`` ``[d_in, d_in]`` in float64."""
        if self.count <= 0:
            raise ValueError("second moment over zero tokens")
        return self.mom2.double() / self.count

    def merge(self, other: "SecondMoment") -> "SecondMoment":
        return SecondMoment(self.mom2.double() + other.mom2.double(), self.count + other.count)


def model_basename(model: nn.Module) -> str:
    """The model's name as EasyEdit caches it: the last path part of ``_name_or_path``."""
    name = str(getattr(model.config, "_name_or_path", "") or "").rstrip("/").rsplit("/", 1)[-1]
    return name or type(model).__name__


def stats_path(stats_dir: str, model_name: str, ds_name: str, module: str, dtype: str, n_samples: int) -> Path:
    """EasyEdit's cache file for a module's second moment."""
    return Path(stats_dir) / model_name / f"{ds_name}_stats" / f"{module}_{dtype}_mom2_{n_samples}.npz"


def save_second_moment(path: Path, stat: SecondMoment, sample_size: int, dtype: str, meta: Dict[str, str]) -> None:
    """Write ``stat`` atomically in EasyEdit's npz layout (``meta`` as ``zerounlearn.*`` strings); raises
    :class:`StatsCacheError` naming the folder when it cannot be created or written."""
    if dtype not in _NP_DTYPES:
        raise StatsCacheError(f"{path}: cannot store statistics as {dtype!r}; use one of {sorted(_NP_DTYPES)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StatsCacheError(f"cannot create the statistics folder {path.parent}: {exc}") from exc
    clean_stale_temp_files(path.parent)
    arrays = {
        "mom2.constructor": np.array("zerounlearn_editor.engine.stats.SecondMoment()"),
        "mom2.count": np.array(stat.count),
        "mom2.mom2": stat.mom2.double().numpy().astype(_NP_DTYPES[dtype]),
        "sample_size": np.array(sample_size),
    }
    arrays.update({f"zerounlearn.{k}": np.array(v) for k, v in meta.items()})
    prefix = f"{path.name}.{socket.gethostname().replace('.', '_')}.{os.getpid()}."  # see clean_stale_temp_files
    try:
        write_atomic(path, lambda handle: np.savez(handle, **arrays), prefix)
    except OSError as exc:  # e.g. a full disk: no partial file is left, the cache is as it was
        raise StatsCacheError(f"cannot write the statistics file {path} ({exc}); nothing was written there "
                              "(stats_dir must be a writable folder with room for it)") from exc


def load_second_moment(path: Path) -> tuple[SecondMoment, Dict[str, str]]:
    """Read a cached second moment (EasyEdit's or ours) without pickle, and its metadata (``zerounlearn.*``,
    ``sample_size``, the stored ``dtype``); raises :class:`StatsCacheError` naming the file when it is not a
    readable statistics file."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise StatsCacheError(f"{path}: not an npz archive of statistics")
            absent = [k for k in ("mom2.mom2", "mom2.count") if k not in data.files]
            if absent:
                raise StatsCacheError(f"{path}: not a statistics file: key(s) {absent} missing")
            mom2 = data["mom2.mom2"]
            if mom2.ndim != 2 or mom2.shape[0] != mom2.shape[1] or not np.issubdtype(mom2.dtype, np.floating):
                raise StatsCacheError(f"{path}: 'mom2.mom2' is not a square float matrix (shape {mom2.shape}, {mom2.dtype})")
            count = int(data["mom2.count"])
            stat = SecondMoment(torch.from_numpy(mom2.astype(np.float64)), count)
            meta = {k.split(".", 1)[1]: str(data[k]) for k in data.files if k.startswith("zerounlearn.")}
            if "sample_size" in data.files:
                meta["sample_size"] = str(data["sample_size"])
            meta["dtype"] = str(mom2.dtype)  # the stored dtype
    except StatsCacheError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise StatsCacheError(f"{path}: unreadable statistics file ({type(exc).__name__}: {exc})") from exc
    if count < 0 or not torch.isfinite(stat.mom2).all():
        raise StatsCacheError(f"{path}: corrupt statistics (count {count}, finite={bool(torch.isfinite(stat.mom2).all())})")
    return stat, meta


def padded_batches(
    tok, texts: Sequence[str], max_length: int, batch_size: int, progress: bool = False, desc: str = "batches"
) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded CPU batches ``(input_ids [b, L] long, mask [b, L] bool)`` of ``texts`` truncated to
    ``max_length`` tokens, longest first, ``batch_size`` at a time (empty passages dropped)."""
    pad = pad_token_id(tok)
    ids = [list(tok(t, truncation=True, max_length=max_length)["input_ids"]) for t in texts]
    ids = sorted((row for row in ids if row), key=len, reverse=True)
    batches = [ids[i : i + batch_size] for i in range(0, len(ids), batch_size)]
    for rows in tqdm(batches, desc=desc, disable=not (progress and progress_enabled()), unit="batch"):
        padded = pad_sequences(rows, pad, "right", torch.device("cpu"))
        yield padded.input_ids, padded.attention_mask.bool()


def shard_texts(texts: Sequence[str], shard: Optional[Tuple[int, int]]) -> List[str]:
    """``texts[rank::world_size]`` for ``shard = (rank, world_size)``; all texts for ``None``."""
    if shard is None:
        return list(texts)
    rank, world_size = shard
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"invalid shard {shard!r}: need 0 <= rank < world_size")
    return list(texts[rank::world_size])


@torch.no_grad()
def collect_second_moments(
    model: nn.Module,
    tok,
    texts: Sequence[str],
    module_names: Sequence[str],
    max_length: int = 256,
    batch_size: int = 16,
    progress: bool = True,
    product_dtype: torch.dtype = torch.float64,
    shard: Optional[Tuple[int, int]] = None,
) -> Dict[str, SecondMoment]:
    """``sum k k^T`` ``[d_in, d_in]`` (float64) and token counts of every module's input (padding excluded),
    one pass per batch, each batch's ``K^T K`` in ``product_dtype``. ``shard = (rank, world_size)`` collects
    only ``texts[rank::world_size]`` (an empty shard gives zeros over 0 tokens)."""
    if not texts:
        raise ValueError("no texts to collect statistics from")
    if not module_names:
        raise ValueError("no modules to collect statistics for")
    texts = shard_texts(texts, shard)
    if not texts:
        return {name: SecondMoment(torch.zeros(_module_input_dim(model, name), _module_input_dim(model, name),
                                               dtype=torch.float64), 0) for name in module_names}
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    last = max(module_names, key=lambda n: order.get(n, -1))
    device = model_device(model)
    sums: Dict[str, Optional[torch.Tensor]] = {name: None for name in module_names}
    count = 0
    with eval_mode(model):  # no dropout in the keys; the caller's train/eval flags come back
        for input_ids, mask in padded_batches(tok, texts, max_length, batch_size, progress, desc="C0 statistics"):
            with capture_inputs(model, module_names, stop_after=last) as inputs, contextlib.suppress(StopForward):
                model(input_ids=input_ids.to(device), attention_mask=mask.long().to(device))
            for name in module_names:
                feats = inputs[name][mask.to(inputs[name].device)].to(product_dtype)
                update = (feats.t() @ feats).double()
                sums[name] = update if sums[name] is None else sums[name] + update
            count += int(mask.sum())
    return {name: SecondMoment(value.cpu(), count) for name, value in sums.items()}


def layer_second_moments(
    model: nn.Module,
    tok,
    layers: Sequence[int],
    module_tmp: str,
    stats_dir: str,
    corpus: str,
    n_samples: int,
    dtype: str = "float32",
    max_length: int = 256,
    batch_size: int = 16,
    model_name: Optional[str] = None,
    force: bool = False,
    progress: bool = True,
    shard: Optional[Tuple[int, int]] = None,
) -> Dict[int, SecondMoment]:
    """``{layer: SecondMoment}``: the cached files, the missing or mismatching ones computed together (and
    overwritten). ``shard = (rank, world_size)`` computes the statistic of ``texts[rank::world_size]`` of every
    layer into shard files beside the cache files (:func:`shard_path`; the cache is not read), which
    :func:`merge_second_moment_files` turns into the cache files."""
    if n_samples < 1:
        raise ValueError(f"mom2_n_samples / --n must be >= 1, got {n_samples}")
    check_edited_modules(model, layers, module_tmp)
    name = model_name or model_basename(model)
    modules = {layer: module_tmp.format(layer) for layer in layers}

    @functools.cache
    def get_corpus() -> Corpus:
        return load_corpus(corpus, limit=n_samples)

    ds_name = corpus_cache_name(corpus)
    paths = {layer: stats_path(stats_dir, name, ds_name, module, dtype, n_samples) for layer, module in modules.items()}
    if shard is not None:
        paths = {layer: shard_path(path, *shard) for layer, path in paths.items()}
    fingerprint_of_model = model_fingerprint(model, module_tmp)
    result: Dict[int, SecondMoment] = {}
    missing: List[int] = []
    for layer, module in modules.items():
        path = paths[layer]
        if path.exists() and not force and shard is None:
            try:
                stat, meta = load_second_moment(path)
            except StatsCacheError as exc:
                LOG.warning("%s; treating it as missing and recomputing", exc)
                missing.append(layer)
                continue
            d_in = _module_input_dim(model, module)
            fingerprint = meta.get("corpus_fingerprint")
            if stat.mom2.shape != (d_in, d_in):
                LOG.warning("%s: shape %s does not match d_in=%d; recomputing", path, tuple(stat.mom2.shape), d_in)
            elif meta.get("model_fingerprint") not in (None, fingerprint_of_model):
                LOG.warning(
                    "%s: made from another model with the same folder name %r (model fingerprint %s, this model %s); "
                    "recomputing", path, name, meta["model_fingerprint"], fingerprint_of_model,
                )
            elif meta.get("module") not in (None, module):
                LOG.warning("%s: holds the statistic of module %r, not %r; recomputing", path, meta["module"], module)
            elif fingerprint is not None and fingerprint != get_corpus().fingerprint:
                LOG.warning("%s: built from another version of corpus %r; recomputing", path, corpus)
            # a half-precision cache is not reused by a float32/float64 model (the reverse is fine)
            elif meta.get("model_dtype") in _HALF and _module_dtype(model, module) not in _HALF:
                LOG.warning("%s: computed from a %s model, this one is %s; recomputing", path, meta["model_dtype"],
                            _module_dtype(model, module))
            elif meta.get("max_length") not in (None, str(max_length)):
                LOG.warning(
                    "%s: built with passages cut at %s tokens, not mom2_max_length=%d; recomputing",
                    path, meta["max_length"], max_length,
                )
            else:
                if "model_fingerprint" not in meta:
                    LOG.info("%s carries no model fingerprint (EasyEdit's file?); used as it is", path)
                LOG.info("loaded C0 statistics from %s", path)
                result[layer] = stat
                continue
        missing.append(layer)
    if missing:
        folder = paths[missing[0]].parent
        existing = existing_ancestor(folder)  # checked before the corpus pass, not after it
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise StatsCacheError(
                f"the statistics folder {folder} cannot be written ({existing} is not a writable folder); "
                "set stats_dir to a writable folder"
            )
        itemsize = np.dtype(_NP_DTYPES.get(dtype, np.float64)).itemsize
        needed = sum(_module_input_dim(model, modules[l]) ** 2 * itemsize for l in missing)
        free = shutil.disk_usage(existing).free
        if free < needed + (1 << 20):
            raise StatsCacheError(
                f"the statistics folder {folder} has {free:,} bytes free, the statistics need about "
                f"{needed:,}; free some space or set stats_dir to another disk"
            )
        data = get_corpus()
        if len(data.texts) < n_samples:
            LOG.warning("corpus %r has %d passages, fewer than mom2_n_samples=%d", corpus, len(data.texts), n_samples)
        product_dtype = torch.float64 if dtype == "float64" else torch.float32
        LOG.info("computing C0 statistics of layers %s from %d passages of corpus %r (cache: %s)", missing,
                 len(data.texts), corpus, folder)
        stats = collect_second_moments(model, tok, data.texts, [modules[l] for l in missing], max_length,
                                       batch_size, progress, product_dtype, shard)
        for layer in missing:
            meta = {"corpus_fingerprint": data.fingerprint, "max_length": str(max_length),
                    "n_passages": str(len(shard_texts(data.texts, shard))), "module": modules[layer],
                    "model_fingerprint": fingerprint_of_model, "model_dtype": _module_dtype(model, modules[layer])}
            if shard is not None:
                meta["shard"] = f"{shard[0]}/{shard[1]}"
            save_second_moment(paths[layer], stats[modules[layer]], n_samples, dtype, meta)
            LOG.info("wrote C0 statistics to %s", paths[layer])
            result[layer] = stats[modules[layer]]
    return result


def corpus_cache_name(corpus: str) -> str:
    """The ``ds_name`` part of the cache path: a built-in corpus's name, a file's stem, a folder's name
    or the hub name (``wiki_passages_3643`` for both the built-in corpus and its ``.jsonl`` file)."""
    from zerounlearn_editor.data.builtin import builtin_corpus_name

    builtin = builtin_corpus_name(corpus)
    if builtin is not None:
        return builtin
    path = Path(corpus).expanduser()
    if path.suffix.lower() in (".txt", ".jsonl", ".json"):
        return path.stem
    if path.is_dir():
        return path.name
    return corpus.removeprefix("hub:").replace("/", "_")


_HALF = ("float16", "bfloat16")


def _module_dtype(model: nn.Module, module_name: str) -> str:
    """The edited module's weight dtype, e.g. ``"bfloat16"``."""
    return str(get_weight_matrix(get_module(model, module_name)).dtype).removeprefix("torch.")


def _module_input_dim(model: nn.Module, module_name: str) -> int:
    return get_weight_matrix(get_module(model, module_name)).shape[1]


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
            raise ValueError(f"{path}: shape {tuple(stat.mom2.shape)} differs from {first_path}'s {tuple(first.mom2.shape)}")
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
