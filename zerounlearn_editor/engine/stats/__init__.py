"""Utility statistic ``C0 = E[k k^T]`` of the edited modules' inputs over general text.

All edited layers are collected in one forward pass per batch. Results are cached in EasyEdit's layout
(``{stats_dir}/{model basename}/{ds_name}_stats/{module}_{dtype}_mom2_{n}.npz``, keys ``mom2.mom2`` = sum of
``k k^T`` ``[d_in, d_in]``, ``mom2.count`` = tokens, ``sample_size``) so EasyEdit's ROME/MEMIT/AlphaEdit read
the same file, plus ``zerounlearn.*`` metadata (corpus and model fingerprints, max length, module). A file
recording another model, corpus version, max length, module or shape is recomputed with a warning (a load of the
same weights in another dtype is the same model: :func:`same_weights_at_another_precision`; a half-precision model's
statistic is used but never written over a full-precision model's file); an unreadable one is treated as missing;
EasyEdit's own files (no metadata) are read as they are. Files are written atomically. Shards (``zerounlearn stats
--shard`` / ``stats-merge``): :func:`layer_second_moments` with ``shard`` writes the statistic of
``texts[rank::world_size]``, :func:`merge_second_moment_files` sums shard files.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from zerounlearn_editor.data.corpus import Corpus, load_corpus
from zerounlearn_editor.engine.stats.cache import (
    NP_DTYPES,
    SecondMoment,
    StatsCacheError,
    corpus_cache_name,
    load_second_moment,
    save_second_moment,
    stats_path,
)
from zerounlearn_editor.engine.stats.collect import (
    HALF_DTYPES,
    STATS_BATCH_SIZE,
    collect_second_moments,
    module_dtype,
    module_input_dim,
    padded_batches,
    shard_texts,
)
from zerounlearn_editor.engine.stats.fingerprint import (
    model_basename,
    model_fingerprint,
    same_weights_at_another_precision,
    weights_sample,
)
from zerounlearn_editor.engine.stats.shards import merge_second_moment_files, shard_path
from zerounlearn_editor.engine.stats.tempfiles import STALE_TEMP_SECONDS, clean_stale_temp_files
from zerounlearn_editor.support.model_access import check_edited_modules
from zerounlearn_editor.support.output_dir import existing_ancestor

__all__ = [
    "STATS_BATCH_SIZE",
    "STALE_TEMP_SECONDS",
    "SecondMoment",
    "StatsCacheError",
    "StatsRequest",
    "cached_second_moments",
    "layer_second_moments",
    "collect_second_moments",
    "padded_batches",
    "shard_texts",
    "model_fingerprint",
    "same_weights_at_another_precision",
    "model_basename",
    "clean_stale_temp_files",
    "stats_path",
    "save_second_moment",
    "load_second_moment",
    "corpus_cache_name",
    "shard_path",
    "merge_second_moment_files",
]

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatsRequest:
    """Which statistic :func:`cached_second_moments` returns: the inputs of ``module_tmp`` at each of ``layers``
    over the first ``n_samples`` passages of ``corpus`` cut at ``max_length`` tokens, cached as ``dtype`` under
    ``stats_dir/<model_name or the model's folder name>``; ``batch_size`` passages per forward pass. ``force``
    recomputes (and overwrites) every file; ``shard = (rank, world_size)`` computes ``texts[rank::world_size]``
    into shard files (:func:`shard_path`; the cache is not read), which :func:`merge_second_moment_files` turns
    into the cache files."""

    layers: Sequence[int]
    module_tmp: str
    stats_dir: str
    corpus: str
    n_samples: int
    dtype: str = "float32"
    max_length: int = 256
    batch_size: int = STATS_BATCH_SIZE
    model_name: Optional[str] = None
    force: bool = False
    progress: bool = True
    shard: Optional[Tuple[int, int]] = None

    @classmethod
    def of_hparams(cls, hparams, corpus: Optional[str] = None, layers: Optional[Sequence[int]] = None,
                   module_tmp: Optional[str] = None, **changes) -> "StatsRequest":
        """The statistic an :class:`~zerounlearn_editor.engine.hparams.EditHyperParams` edit reads (its layers,
        module, ``stats_dir``, ``mom2_*`` keys), ``corpus``/``layers``/``module_tmp`` and ``changes`` replacing them."""
        return cls(
            tuple(hparams.layers if layers is None else layers), module_tmp or hparams.rewrite_module_tmp,
            hparams.stats_dir, corpus or hparams.mom2_dataset, hparams.mom2_n_samples, hparams.mom2_dtype,
            hparams.mom2_max_length, **changes,
        )


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
    """:func:`cached_second_moments` with the :class:`StatsRequest` given field by field (EasyEdit-style call)."""
    request = StatsRequest(layers, module_tmp, stats_dir, corpus, n_samples, dtype, max_length, batch_size, model_name,
                           force, progress, shard)
    return cached_second_moments(model, tok, request)


def cached_second_moments(model: nn.Module, tok, request: StatsRequest) -> Dict[int, SecondMoment]:
    """``{layer: SecondMoment}`` of ``request``: the cached files, the missing or mismatching ones computed together
    in one pass (and overwritten); see :class:`StatsRequest`."""
    r = request
    if r.n_samples < 1:
        raise ValueError(f"mom2_n_samples / --n must be >= 1, got {r.n_samples}")
    check_edited_modules(model, r.layers, r.module_tmp)
    name = r.model_name or model_basename(model)
    modules = {layer: r.module_tmp.format(layer) for layer in r.layers}

    @functools.cache
    def get_corpus() -> Corpus:
        return load_corpus(r.corpus, limit=r.n_samples)

    ds_name = corpus_cache_name(r.corpus)
    paths = {layer: stats_path(r.stats_dir, name, ds_name, module, r.dtype, r.n_samples)
             for layer, module in modules.items()}
    if r.shard is not None:
        paths = {layer: shard_path(path, *r.shard) for layer, path in paths.items()}
    fingerprint = model_fingerprint(model, r.module_tmp)
    result: Dict[int, SecondMoment] = {}
    for layer, module in modules.items():
        if paths[layer].exists() and not r.force and r.shard is None:
            stat = _usable_cache_file(paths[layer], model, module, fingerprint, name, r, get_corpus)
            if stat is not None:
                result[layer] = stat
    missing = [layer for layer in modules if layer not in result]
    if missing:
        _check_room(paths[missing[0]].parent, model, [modules[layer] for layer in missing], r.dtype)
        kept = {layer for layer in missing if _full_precision_file(paths[layer], model, modules[layer])}
        result.update(_compute(model, tok, r, {layer: modules[layer] for layer in missing}, paths, fingerprint,
                               get_corpus(), kept))
    return {layer: result[layer] for layer in modules}


def _full_precision_file(path, model: nn.Module, module: str) -> bool:
    """Whether ``path`` holds a statistic of a full-precision model and ``model`` is a half-precision one: such a
    file is never overwritten by this model's (less exact) statistic."""
    if not path.is_file() or module_dtype(model, module) not in HALF_DTYPES:
        return False
    try:
        _, meta = load_second_moment(path)
    except StatsCacheError:
        return False
    return meta.get("model_dtype", "float32") not in HALF_DTYPES


def _usable_cache_file(path, model: nn.Module, module: str, fingerprint_of_model: str, name: str, r: StatsRequest,
                       get_corpus) -> Optional[SecondMoment]:
    """The statistic stored at ``path`` when it is what ``r`` asks of this model, else ``None`` (with a warning
    saying why it is recomputed)."""
    try:
        stat, meta = load_second_moment(path)
    except StatsCacheError as exc:
        LOG.warning("%s; treating it as missing and recomputing", exc)
        return None
    d_in = module_input_dim(model, module)
    fingerprint = meta.get("corpus_fingerprint")
    if stat.mom2.shape != (d_in, d_in):
        LOG.warning("%s: shape %s does not match d_in=%d; recomputing", path, tuple(stat.mom2.shape), d_in)
    elif meta.get("model_fingerprint") not in (None, fingerprint_of_model) and not same_weights_at_another_precision(
            meta, model, r.module_tmp, module_dtype(model, module)):
        LOG.warning(
            "%s: made from another model with the same folder name %r (model fingerprint %s, this model %s); "
            "recomputing", path, name, meta["model_fingerprint"], fingerprint_of_model,
        )
    elif meta.get("module") not in (None, module):
        LOG.warning("%s: holds the statistic of module %r, not %r; recomputing", path, meta["module"], module)
    elif fingerprint is not None and fingerprint != get_corpus().fingerprint:
        LOG.warning("%s: built from another version of corpus %r; recomputing", path, r.corpus)
    # a half-precision cache is not reused by a float32/float64 model (the reverse is fine)
    elif meta.get("model_dtype") in HALF_DTYPES and module_dtype(model, module) not in HALF_DTYPES:
        LOG.warning("%s: computed from a %s model, this one is %s; recomputing", path, meta["model_dtype"],
                    module_dtype(model, module))
    elif meta.get("max_length") not in (None, str(r.max_length)):
        LOG.warning(
            "%s: built with passages cut at %s tokens, not mom2_max_length=%d; recomputing",
            path, meta["max_length"], r.max_length,
        )
    else:
        if "model_fingerprint" not in meta:
            LOG.info("%s carries no model fingerprint (EasyEdit's file?); used as it is", path)
        elif meta["model_fingerprint"] != fingerprint_of_model:
            LOG.info("%s: made from a %s load of these weights (this one is %s); used as it is", path,
                     meta.get("model_dtype"), module_dtype(model, module))
        elif "model_sample" not in meta and module_dtype(model, module) not in HALF_DTYPES:
            _add_weights_sample(path, stat, meta, model, r.module_tmp)
        LOG.info("loaded C0 statistics from %s", path)
        return stat
    return None


def _add_weights_sample(path, stat: SecondMoment, meta: Dict[str, str], model: nn.Module, module_tmp: str) -> None:
    """Rewrite a file this full-precision model made before statistics recorded a weights sample, with the sample
    (the statistic unchanged), so later loads of the model in another dtype can reuse it; a read-only cache is
    left as it is."""
    kept = {k: v for k, v in meta.items() if k not in ("sample_size", "dtype")}
    kept["model_sample"] = weights_sample(model, module_tmp)
    try:
        save_second_moment(path, stat, int(meta.get("sample_size", stat.count)), meta["dtype"], kept)
        LOG.info("%s: added the weights sample a load in another dtype is matched by", path)
    except (StatsCacheError, KeyError, ValueError) as exc:
        LOG.info("%s: no weights sample added (%s)", path, exc)


def _check_room(folder, model: nn.Module, modules: Sequence[str], dtype: str) -> None:
    """Raise :class:`StatsCacheError` when ``folder`` cannot be written or has no room for the statistics of
    ``modules`` (checked before the corpus pass, not after it)."""
    existing = existing_ancestor(folder)
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise StatsCacheError(
            f"the statistics folder {folder} cannot be written ({existing} is not a writable folder); "
            "set stats_dir to a writable folder"
        )
    itemsize = np.dtype(NP_DTYPES.get(dtype, np.float64)).itemsize
    needed = sum(module_input_dim(model, module) ** 2 * itemsize for module in modules)
    free = shutil.disk_usage(existing).free
    if free < needed + (1 << 20):
        raise StatsCacheError(
            f"the statistics folder {folder} has {free:,} bytes free, the statistics need about "
            f"{needed:,}; free some space or set stats_dir to another disk"
        )


def _compute(model: nn.Module, tok, r: StatsRequest, modules: Dict[int, str], paths, fingerprint_of_model: str,
             data: Corpus, kept: Sequence[int] = ()) -> Dict[int, SecondMoment]:
    """Collect the statistics of ``modules`` (by layer) in one pass over ``data`` and write their files (not those
    of the layers in ``kept``: used, not cached)."""
    if len(data.texts) < r.n_samples:
        LOG.warning("corpus %r has %d passages, fewer than mom2_n_samples=%d", r.corpus, len(data.texts), r.n_samples)
    product_dtype = torch.float64 if r.dtype == "float64" else torch.float32
    LOG.info("computing C0 statistics of layers %s from %d passages of corpus %r (cache: %s)", list(modules),
             len(data.texts), r.corpus, paths[next(iter(modules))].parent)
    stats = collect_second_moments(model, tok, data.texts, list(modules.values()), r.max_length, r.batch_size,
                                   r.progress, product_dtype, r.shard)
    sample = weights_sample(model, r.module_tmp)  # another dtype's load of these weights may reuse the files
    result = {}
    for layer, module in modules.items():
        meta = {"corpus_fingerprint": data.fingerprint, "max_length": str(r.max_length),
                "n_passages": str(len(shard_texts(data.texts, r.shard))), "module": module,
                "model_fingerprint": fingerprint_of_model, "model_dtype": module_dtype(model, module),
                "model_sample": sample}
        if r.shard is not None:
            meta["shard"] = f"{r.shard[0]}/{r.shard[1]}"
        result[layer] = stats[module].as_stored(r.dtype)  # what the file holds, whether or not it is written
        if layer in kept:
            LOG.warning("%s holds the statistic of a full-precision model; this %s model's statistic is used but "
                        "not written over it", paths[layer], meta["model_dtype"])
            continue
        save_second_moment(paths[layer], stats[module], r.n_samples, r.dtype, meta)
        LOG.info("wrote C0 statistics to %s", paths[layer])
    return result
