"""Edited weights of audit rows, cached: the diagnosis of issue 45 reads the same edit many times.

:func:`cached_edit` runs a prepared method's edit on the loaded model once per (row signature, case ids, model
fingerprint), stores the edited parameters' new values as a safetensors file (atomically, keyed in its metadata by
what it depends on) and restores the model; later calls read the file. :func:`applied` applies such weights for the
length of a ``with`` block and restores the unedited values after it, bit-identically.
"""
from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.harness.method_specs import PreparedMethod, StatsBank
from zerounlearn_editor.support.files import sha256_of_json, write_bytes_atomic

LOG = logging.getLogger(__name__)


def edit_key(signature: str, case_ids: Sequence[str], fingerprint: str,
             retain: Optional[Sequence[Mapping[str, Any]]] = None) -> str:
    """The cache key of one edit: the row's config signature, the facts edited, the unedited model and the retain
    requests the edit was given (none: the key without them)."""
    key: Dict[str, Any] = {"signature": signature, "case_ids": list(case_ids), "model": fingerprint}
    if retain:
        key["retain"] = [dict(r) for r in retain]
    return sha256_of_json(key)


def cached_edit(method: PreparedMethod, model: nn.Module, tok: Any, requests: Sequence[Mapping[str, Any]],
                bank: StatsBank, path: Path, key: str,
                retain: Optional[Sequence[Mapping[str, Any]]] = None) -> Dict[str, torch.Tensor]:
    """The edited parameters' values ``{name: tensor}`` after ``method.edit`` of ``requests`` (the model is left
    unedited; a method that ``uses_retain`` is given ``retain``, which must then be a list); read from ``path`` when
    its metadata holds ``key``, else computed and written there."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save

    if path.is_file():
        with safe_open(str(path), "pt") as handle:
            stored = (handle.metadata() or {}).get("key")
        if stored == key:
            LOG.info("%s: edit read from %s", method.name, path)
            return load_file(str(path))
        LOG.info("%s: %s holds another edit; recomputing", method.name, path)
    if method.edit is None:
        raise ValueError(f"{method.name}: cannot edit ({method.skip_reason})")
    if method.uses_retain and retain is None:
        raise ValueError(f"{method.name}: needs a retain set (--retain POLICY:K)")
    LOG.info("%s: editing %d requests", method.name, len(requests))
    extra = {"retain": [dict(r) for r in retain]} if method.uses_retain and retain is not None else {}
    outcome = method.edit(model, tok, [dict(r) for r in requests], bank, **extra)
    params = dict(model.named_parameters())
    try:
        edited = {name: params[name].detach().clone().contiguous() for name in outcome.weights_copy}
    finally:
        restore_weights(model, outcome.weights_copy)
    metadata = {"key": key, "row": method.name, "details": json.dumps(outcome.details, default=str)[:10000]}
    write_bytes_atomic(path, save(edited, metadata=metadata))
    return edited


@contextlib.contextmanager
def applied(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> Iterator[nn.Module]:
    """``model`` with ``weights`` (``{parameter name: value}``) copied in, restored on leaving the block."""
    params = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(params))
    if unknown:
        raise KeyError(f"edited weights name parameters the model does not have: {unknown[:3]}")
    original = {name: params[name].detach().clone() for name in weights}
    try:
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(value)
        yield model
    finally:
        restore_weights(model, original)
