"""Measure the model quantities ZeroUnlearn-GD's setting rules read
(:mod:`zerounlearn_editor.methods.zerounlearn_gd.scale_rules`): one pass over a few passages of general text.

Per edited layer: the key covariance ``C0 = mean k k^T`` ``[d_in, d_in]`` of the edited module's input (every
non-padding token) and its median eigenvalue; what the MLP adds to the residual (``|f(v)|`` through a
post-feedforward norm, :mod:`zerounlearn_editor.engine.post_mlp`); at the last edited layer the residual's RMS per
coordinate, its norm and its median absolute coordinate (the lower median over the ``d`` coordinates of each token;
the first position left out: many models keep an outsized state there).
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch
from torch import nn

from zerounlearn_editor.data.corpus import load_corpus
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.post_mlp import apply_post_mlp, detect_post_mlp_maps
from zerounlearn_editor.engine.stats.collect import padded_batches
from zerounlearn_editor.methods.zerounlearn_gd.scale_rules import ModelScales
from zerounlearn_editor.support.model_access import (
    StopForward,
    capture_inputs,
    capture_outputs,
    hidden_of,
    model_device,
)

SCALE_PASSAGES = 50
"""Passages of the corpus :func:`measure_scales` reads (at :data:`SCALE_MAX_LENGTH` tokens each)."""
SCALE_MAX_LENGTH = 128


def median_eigenvalue(moment: torch.Tensor) -> float:
    """The median eigenvalue of a symmetric ``[d, d]`` matrix (float64)."""
    return float(torch.linalg.eigvalsh(moment.double()).median())


@torch.no_grad()
def measure_scales(model: nn.Module, tok, layers: Sequence[int], layer_module_tmp: str, rewrite_module_tmp: str,
                   corpus: str = "wiki_passages_3643", n_passages: int = SCALE_PASSAGES,
                   max_length: int = SCALE_MAX_LENGTH) -> ModelScales:
    """The :class:`ModelScales` of ``model`` edited at ``layers`` (see the module docstring)."""
    layers = sorted(int(l) for l in layers)
    maps = detect_post_mlp_maps(model, layer_module_tmp, rewrite_module_tmp, layers)
    rewrites = [rewrite_module_tmp.format(l) for l in layers]
    last = layer_module_tmp.format(layers[-1])
    texts = load_corpus(corpus, limit=n_passages).texts
    device = model_device(model)
    sums = {name: None for name in rewrites}
    post = {l: [0.0, 0] for l in layers}
    count, rms_sum, norm_sum, median_sum, res_count = 0, 0.0, 0.0, 0.0, 0
    with eval_mode(model):
        for ids, mask in padded_batches(tok, texts, max_length, 16):
            with capture_inputs(model, rewrites) as ins, capture_outputs(model, rewrites + [last], stop_after=last) \
                    as outs, contextlib.suppress(StopForward):
                model(input_ids=ids.to(device), attention_mask=mask.long().to(device))
            for name, layer in zip(rewrites, layers):
                keys = ins[name][mask.to(ins[name].device)].double()
                sums[name] = keys.t() @ keys if sums[name] is None else sums[name] + keys.t() @ keys
                if not maps[layer].is_identity:
                    values = hidden_of(outs[name])[mask.to(ins[name].device)].double().t()  # [d, tokens]
                    post[layer][0] += float(apply_post_mlp(maps[layer], values).norm(dim=0).sum())
                    post[layer][1] += values.shape[1]
            count += int(mask.sum())
            inner = mask.clone()
            inner[:, 0] = False
            h = hidden_of(outs[last])[inner.to(device)].double()
            rms_sum += float(h.pow(2).mean(1).sqrt().sum())
            norm_sum += float(h.norm(dim=1).sum())
            median_sum += float(h.abs().median(dim=1).values.sum())
            res_count += h.shape[0]
    if res_count == 0:
        raise ValueError(f"corpus {corpus!r}: no tokens after the first position in {n_passages} passages")
    identity = all(maps[l].is_identity for l in layers)
    return ModelScales(
        residual_rms=rms_sum / res_count,
        residual_norm=norm_sum / res_count,
        residual_median_abs=median_sum / res_count,
        c0_medians=[median_eigenvalue(sums[name] / count) for name in rewrites],
        key_dim=int(sums[rewrites[0]].shape[0]),
        post_mlp_norms=None if identity else [post[l][0] / max(post[l][1], 1) if not maps[l].is_identity
                                              else float("inf") for l in layers],
    )
