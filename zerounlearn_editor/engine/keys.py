"""Keys ``K_f`` (down_proj inputs at the lookup token) and hidden states at the last edited layer, from batched
forward passes of whole requests over every context (at most :data:`KEY_ROWS_PER_PASS` rows a pass)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.engine.encoding import EncodedBatch, encode_rows
from zerounlearn_editor.engine.prefix_replay import LayerPrefixReplay
from zerounlearn_editor.engine.requests import ForgetRequest
from zerounlearn_editor.support.memory import release_free_memory
from zerounlearn_editor.support.model_access import StopForward, capture_inputs, capture_outputs, model_device

KEY_ROWS_PER_PASS = 32
"""Most rows (request x context prefix) in one forward pass of a key read: a chunk of ``chunk_size`` requests
is read in passes of ``max(1, KEY_ROWS_PER_PASS // contexts)`` whole requests, so the activations a read holds
do not grow with the number of requests beyond that."""


@dataclass
class LayerReadout:
    """``keys`` ``[d_in, n]`` (mean over contexts), ``hidden`` ``[n, d_model]`` (bare prompt); when asked for,
    ``context_mom2`` ``[d_in, d_in]`` (float64), the sum of ``k k^T`` over :func:`context_position_mask`'s
    positions, and their number ``context_count``."""

    keys: torch.Tensor
    hidden: torch.Tensor
    context_mom2: Optional[torch.Tensor] = None
    context_count: int = 0


def context_position_mask(batch: EncodedBatch) -> torch.Tensor:
    """``[rows, seq]`` bool: the positions whose keys form the context second moment, every real
    token but the first one and the lookup token."""
    lookup = batch.lookup
    mask = batch.attention_mask.to(lookup.device).bool().clone()
    mask[:, 0] = False
    mask[torch.arange(len(mask), device=mask.device), lookup] = False
    return mask


def _at_lookup(states: torch.Tensor, lookup: torch.Tensor) -> torch.Tensor:
    """``states[i, lookup[i]]`` ``[rows, d]`` in float32, indexed on ``states``' own device."""
    lookup = lookup.to(states.device)
    return states[torch.arange(len(lookup), device=states.device), lookup].float()


def _first_rows(parts: List[torch.Tensor], rows: Optional[int]) -> torch.Tensor:
    """The chunks' hidden states ``[rows_i, d]`` concatenated and cut to the first ``rows`` (None: all);
    ``[0, 0]`` when no chunk read any."""
    if not parts:
        return torch.zeros(0, 0)
    joined = torch.cat(parts)
    return joined if rows is None else joined[:rows]


@torch.no_grad()
def read_keys_and_hidden(
    model: nn.Module,
    tok,
    requests: Sequence[ForgetRequest],
    prefixes: Sequence[str],
    key_module: str,
    hidden_module: str,
    fact_token: str,
    chunk_size: int,
    context_moment: bool = False,
    prefix_replay: Optional[LayerPrefixReplay] = None,
    hidden_rows: Optional[int] = None,
) -> LayerReadout:
    """Keys at ``key_module``'s input (mean over the prefixes) and hidden states at ``hidden_module``'s output
    (bare prompt), float32 on the CPU, in forward passes of at most ``chunk_size`` requests and
    :data:`KEY_ROWS_PER_PASS` rows. ``context_moment``: see :class:`LayerReadout`; ``prefix_replay`` (one per
    edit) skips the layers below the previous read's (replayed, as edited) on repeated reads, with bit-identical
    results.

    ``hidden_rows`` (None: all): only the first ``hidden_rows`` requests' hidden states are wanted; ``hidden`` is
    then ``[min(hidden_rows, n), d_model]`` and a pass whose requests all come later stops at ``key_module``'s
    input (the same passes, so keys and moment are bit-identical; the layers above are not run)."""
    device = model_device(model)
    n_ctx = len(prefixes)
    keys: List[torch.Tensor] = []
    hidden: List[torch.Tensor] = []
    mom2: Optional[torch.Tensor] = None
    count = 0
    replay = prefix_replay.around_forward if prefix_replay is not None else None
    requests = list(requests)
    per_pass = max(1, min(chunk_size, KEY_ROWS_PER_PASS // max(1, n_ctx)))
    for index, start in enumerate(range(0, len(requests), per_pass)):
        chunk = requests[start : start + per_pass]
        contexts = [p for _ in chunk for p in prefixes]
        rows = [r for r in chunk for _ in prefixes]
        batch = encode_rows(
            tok,
            contexts,
            [r.prefix for r in rows],
            [r.subject for r in rows],
            [r.suffix for r in rows],
            fact_token=fact_token,
        ).to(device)
        wants_hidden = hidden_rows is None or start < hidden_rows
        with capture_inputs(model, [key_module], stop_after=None if wants_hidden else key_module) as inputs, (
            capture_outputs(model, [hidden_module] if wants_hidden else [], stop_after=hidden_module)
        ) as outputs, contextlib.suppress(StopForward), (
            replay(index, batch.input_ids) if replay is not None else contextlib.nullcontext()
        ):
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        if context_moment:
            states = inputs[key_module]
            mask = context_position_mask(batch).to(states.device)
            other = states[mask].double()
            mom2 = other.t() @ other if mom2 is None else mom2 + other.t() @ other
            count += other.shape[0]
        k = _at_lookup(inputs[key_module], batch.lookup)
        keys.append(k.view(len(chunk), n_ctx, -1).mean(1).cpu())
        if wants_hidden:
            h = _at_lookup(outputs[hidden_module], batch.lookup)
            hidden.append(h.view(len(chunk), n_ctx, -1)[:, 0].cpu())
        inputs.clear()  # the chunk's captured activations go before the next chunk's forward pass
        outputs.clear()
        release_free_memory()  # and their pages leave the heap (glibc keeps freed blocks otherwise)
    return LayerReadout(
        keys=torch.cat(keys).t().contiguous(), hidden=_first_rows(hidden, hidden_rows),
        context_mom2=None if mom2 is None else mom2.cpu(), context_count=count,
    )
