"""``--pipeline per-request``: our edit with the paper's reference structure, for timing.

The reference implementation gathers its data one request and one layer at a time. This
module plugs that structure into :func:`zerounlearn_editor.engine.pipeline.run_layerwise_edit`
through :class:`~zerounlearn_editor.engine.pipeline.EditStages`; the solves (and therefore the
edited weights, up to float rounding) are exactly ours:

* targets: one optimisation per request, a full forward pass every step
  (``reuse_prefix=False``) instead of batched requests over the cached prefix;
* keys: per edited layer, per request, one pass for the keys (all contexts) and a separate
  pass for the hidden state at the last edited layer;
* statistics: one corpus pass per layer for ``C0`` (instead of one pass for all layers), and
  a second pass per layer accumulating ``V K^T = sum (W k) k^T`` (the reference's
  ``M_0 K_0^T``) -- ``W C0`` in our solve. That product is checked against ``W C0`` and
  logged; the solve reads ``C0`` as ours does.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Dict, Mapping, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.data.corpus import load_corpus
from zerounlearn_editor.engine.encoding import encode_rows
from zerounlearn_editor.engine.hparams import EditHyperParams
from zerounlearn_editor.engine.keys import LayerReadout
from zerounlearn_editor.engine.pipeline import EditStages, batched_statistics
from zerounlearn_editor.engine.requests import ForgetRequest
from zerounlearn_editor.engine.stats import STATS_BATCH_SIZE, SecondMoment, padded_batches
from zerounlearn_editor.engine.targets import NeutralTargets, TargetConfig, optimise_neutral_targets
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
from zerounlearn_editor.support.model_access import (
    StopForward,
    capture_inputs,
    capture_outputs,
    get_module,
    get_weight_matrix,
    model_device,
)

__all__ = [
    "PIPELINES",
    "PER_REQUEST_STAGES",
    "per_request_targets",
    "per_request_keys_and_hidden",
    "per_layer_statistics",
    "value_key_product",
    "apply_zerounlearn_per_request",
    "apply_zerounlearn_gd_per_request",
]

LOG = logging.getLogger(__name__)

PIPELINES = ("ours", "per-request")
"""Names accepted by ``--pipeline``."""


def per_request_targets(
    model: nn.Module,
    tok,
    requests: Sequence[ForgetRequest],
    target_ids: Sequence[Sequence[int]],
    prefixes: Sequence[str],
    cfg: TargetConfig,
) -> NeutralTargets:
    """One target optimisation per request, full forward every step; ``z`` ``[n, d_model]``."""
    single = dataclasses.replace(cfg, reuse_prefix=False, chunk_size=1, optimizer="adam")  # the yardstick
    parts = [
        optimise_neutral_targets(model, tok, requests[i : i + 1], target_ids[i : i + 1], prefixes, single)
        for i in range(len(requests))
    ]
    return NeutralTargets(
        z=torch.cat([p.z for p in parts]),
        h0=torch.cat([p.h0 for p in parts]),
        nll=torch.cat([p.nll for p in parts]),
        steps_run=[s for p in parts for s in p.steps_run],
    )


@torch.no_grad()
def per_request_keys_and_hidden(
    model: nn.Module,
    tok,
    requests: Sequence[ForgetRequest],
    prefixes: Sequence[str],
    key_module: str,
    hidden_module: str,
    fact_token: str,
    chunk_size: int,
) -> LayerReadout:
    """Like :func:`~zerounlearn_editor.engine.keys.read_keys_and_hidden`, one request at a time.

    Per request: a pass over its ``len(prefixes)`` context rows that stops at ``key_module``
    (keys, mean over contexts), then a pass over the bare prompt that stops after
    ``hidden_module``. ``chunk_size`` is ignored. Returns ``keys`` ``[d_in, n]`` and ``hidden``
    ``[n, d_model]``, float32 on the CPU.
    """
    del chunk_size
    device = model_device(model)
    keys, hidden = [], []
    for request in requests:
        rows = len(prefixes)
        batch = encode_rows(
            tok, list(prefixes), [request.prefix] * rows, [request.subject] * rows, [request.suffix] * rows, fact_token
        ).to(device)
        with capture_inputs(model, [key_module], stop_after=key_module) as inputs, contextlib.suppress(StopForward):
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        k = inputs[key_module]
        index = torch.arange(rows, device=k.device)
        keys.append(k[index, batch.lookup.to(k.device)].float().mean(0).cpu())

        bare = encode_rows(tok, [""], [request.prefix], [request.subject], [request.suffix], fact_token).to(device)
        with (
            capture_outputs(model, [hidden_module], stop_after=hidden_module) as outputs,
            contextlib.suppress(StopForward),
        ):
            model(input_ids=bare.input_ids, attention_mask=bare.attention_mask)
        h = outputs[hidden_module]
        hidden.append(h[0, int(bare.lookup[0])].float().cpu())
    return LayerReadout(keys=torch.stack(keys, dim=1).contiguous(), hidden=torch.stack(hidden))


@torch.no_grad()
def value_key_product(
    model: nn.Module,
    tok,
    texts: Sequence[str],
    module_name: str,
    max_length: int,
    batch_size: int,
    progress: bool = False,
) -> SecondMoment:
    """``sum (W k) k^T`` ``[d_out, d_in]`` (float64) over the non-padding tokens of ``texts``.

    ``k`` is ``module_name``'s input, ``W`` its weight; the pass stops at that module. Divided
    by the count it equals ``W C0``.
    """
    module = get_module(model, module_name)
    W = get_weight_matrix(module).detach()
    device = model_device(model)
    total = None
    count = 0
    for input_ids, mask in padded_batches(tok, texts, max_length, batch_size, progress, desc=f"V K^T {module_name}"):
        with capture_inputs(model, [module_name], stop_after=module_name) as inputs, contextlib.suppress(StopForward):
            model(input_ids=input_ids.to(device), attention_mask=mask.long().to(device))
        feats = inputs[module_name][mask.to(inputs[module_name].device)].to(device=W.device, dtype=W.dtype)
        values = feats @ W.t()  # [tokens, d_out]
        update = (values.t().double() @ feats.double())
        total = update if total is None else total + update
        count += int(mask.sum())
    if total is None:
        raise ValueError(f"no tokens to accumulate V K^T of {module_name!r} over")
    return SecondMoment(total.cpu(), count)


def per_layer_statistics(
    model: nn.Module, tok, hparams: EditHyperParams, corpus: str, progress: bool = True
) -> Dict[int, SecondMoment]:
    """``C0`` one layer at a time (a corpus pass per layer, same cache files as ours), then a
    ``V K^T`` pass per layer, compared with ``W C0`` (relative difference logged)."""
    moments: Dict[int, SecondMoment] = {}
    for layer in hparams.layers:
        moments.update(batched_statistics(model, tok, hparams, corpus, progress, layers=[layer]))
    texts = load_corpus(corpus, limit=hparams.mom2_n_samples).texts
    for layer in hparams.layers:
        name = hparams.rewrite_module_tmp.format(layer)
        vkt = value_key_product(model, tok, texts, name, hparams.mom2_max_length, STATS_BATCH_SIZE, progress)
        W = get_weight_matrix(get_module(model, name)).detach().double().cpu()
        expected = W @ moments[layer].moment()
        gap = float((vkt.moment() - expected).norm() / expected.norm().clamp_min(1e-300))
        LOG.info("layer %d: |V K^T / count - W C0| / |W C0| = %.2e", layer, gap)
    return moments


PER_REQUEST_STAGES = EditStages(
    statistics=per_layer_statistics, targets=per_request_targets, keys=per_request_keys_and_hidden
)
"""The reference's per-request / per-layer structure, for :func:`run_layerwise_edit`'s ``stages``."""


def apply_zerounlearn_per_request(
    model: nn.Module,
    tok,
    requests: Sequence[Mapping[str, Any]],
    hparams: ZeroUnlearnHyperParams,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """:func:`~zerounlearn_editor.apply_zerounlearn_to_model` with :data:`PER_REQUEST_STAGES`."""
    kwargs["stages"] = PER_REQUEST_STAGES
    return apply_zerounlearn_to_model(
        model, tok, requests, hparams, copy, return_orig_weights, keep_original_weight, **kwargs
    )


def apply_zerounlearn_gd_per_request(
    model: nn.Module,
    tok,
    requests: Sequence[Mapping[str, Any]],
    hparams: ZeroUnlearnGDHyperParams,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """:func:`~zerounlearn_editor.apply_zerounlearn_gd_to_model` with :data:`PER_REQUEST_STAGES`."""
    kwargs["stages"] = PER_REQUEST_STAGES
    return apply_zerounlearn_gd_to_model(
        model, tok, requests, hparams, copy, return_orig_weights, keep_original_weight, **kwargs
    )
