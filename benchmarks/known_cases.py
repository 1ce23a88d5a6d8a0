"""Shared by the audit scripts (``benchmarks/deep/audit_variants.py``, ``benchmarks/audit/all_methods.py``):
the known-case selection cached as case ids, and bench rows that read another YAML."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import List, Optional

from zerounlearn_editor.engine.hparams import load_config_file
from zerounlearn_editor.evaluation import selection
from zerounlearn_editor.harness.method_specs import MethodSpec, edit_method_spec


def cached_known_selection(cache: Path):
    """:func:`select_known_cases` with its answer stored as case ids in ``cache`` (same data, threshold and n)."""
    original = selection.select_known_cases

    def select(model, tok, cases, n, min_accuracy=1.0, batch_size=64):
        ids = [c.case_id for c in cases]
        key = {"n_cases": len(ids), "first": ids[:3], "min_accuracy": min_accuracy, "n": n}
        if cache.is_file():
            stored = json.loads(cache.read_text())
            if stored["key"] == key:
                by_id = {c.case_id: c for c in cases}
                return [by_id[i] for i in stored["known"]]
        known = original(model, tok, cases, n, min_accuracy=min_accuracy, batch_size=batch_size)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"key": key, "known": [c.case_id for c in known]}))
        return known

    return select


def variant_spec(name: str, path: str, method: Optional[str] = None) -> MethodSpec:
    """The bench's ``method`` (default: the YAML's ``alg_name``; ``ZeroUnlearn-GD+R`` for a retain-aware row fed
    the seed's retain set) reading ``path``, as row ``name``."""
    method = method or load_config_file(path)["alg_name"]
    inner = edit_method_spec(method)

    def with_path(lookup):
        return dataclasses.replace(lookup, overrides={**lookup.overrides, method: path})

    def describe(lookup):
        return inner.describe(with_path(lookup))

    def prepare(ctx):
        prepared = inner.prepare(dataclasses.replace(ctx, lookup=with_path(ctx.lookup)))
        return dataclasses.replace(prepared, name=name)

    return MethodSpec(name, describe, prepare)


def scaled_variant_spec(name: str, path: str, scale: float, method: Optional[str] = None) -> MethodSpec:
    """:func:`variant_spec` whose edit is then scaled: every edited weight ``W + scale (W' - W)`` (a diagnostic of
    what a smaller change along the same direction keeps; the signature records ``scale``). The row's edit details
    (``layer_change_norm``, the fluency guard's figures) are the unscaled edit's."""
    import torch

    inner = variant_spec(name, path, method)

    def describe(lookup):
        return {**inner.describe(lookup), "scaled_change": scale}

    def prepare(ctx):
        prepared = inner.prepare(ctx)

        def edit(model, tok, requests, stats, **kwargs):
            outcome = prepared.edit(model, tok, requests, stats, **kwargs)
            params = dict(model.named_parameters())
            with torch.no_grad():
                for param_name, before in outcome.weights_copy.items():
                    params[param_name].copy_(before + scale * (params[param_name] - before))
            return outcome

        return dataclasses.replace(prepared, edit=edit)

    return MethodSpec(name, describe, prepare)


def add_variants(registry: dict, items: List[str], method: Optional[str] = None) -> None:
    """Add a :func:`variant_spec` row to ``registry`` for each ``NAME=YAML`` of ``items``."""
    for item in items:
        name, path = item.split("=", 1)
        registry[name] = variant_spec(name, path, method)
