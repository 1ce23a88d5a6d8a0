"""One pass over general text collecting ``sum k k^T`` of several modules' inputs at once (padding excluded)."""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import nn
from tqdm.auto import tqdm

from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.stats.cache import SecondMoment
from zerounlearn_editor.evaluation.batching import pad_sequences, pad_token_id
from zerounlearn_editor.support.model_access import (
    StopForward,
    capture_inputs,
    get_module,
    get_weight_matrix,
    model_device,
)
from zerounlearn_editor.support.progress import progress_enabled

__all__ = ["STATS_BATCH_SIZE", "HALF_DTYPES", "padded_batches", "shard_texts", "collect_second_moments",
           "module_dtype", "module_input_dim"]

STATS_BATCH_SIZE = 16
"""Passages per forward pass of the statistics pass (``C0`` does not depend on it beyond float rounding)."""


HALF_DTYPES = ("float16", "bfloat16")


def module_dtype(model: nn.Module, module_name: str) -> str:
    """The edited module's weight dtype, e.g. ``"bfloat16"``."""
    return str(get_weight_matrix(get_module(model, module_name)).dtype).removeprefix("torch.")


def module_input_dim(model: nn.Module, module_name: str) -> int:
    return get_weight_matrix(get_module(model, module_name)).shape[1]


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
        return {name: SecondMoment(torch.zeros(module_input_dim(model, name), module_input_dim(model, name),
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
