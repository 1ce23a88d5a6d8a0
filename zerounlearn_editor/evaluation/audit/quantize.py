"""Round-to-nearest weight quantization of every linear layer, on a deep copy of the model.

Symmetric RTN: a row of ``W`` ``[d_out, d_in]`` (per channel) or each group of ``group_size``
consecutive inputs of a row (grouped) gets the scale ``s = max|w| / (2^(bits-1) - 1)``; weights
become ``s * clamp(round(w / s), -2^(bits-1), 2^(bits-1) - 1)`` (stored dequantized, in the
weight's dtype). The output head (often tied to the input embeddings) stays in full precision.
"""
from __future__ import annotations

import copy
from typing import Dict, Optional, Tuple

import torch
from torch import nn

QUANT_SCHEMES: Dict[str, Tuple[int, Optional[int]]] = {"int8": (8, None), "int4": (4, None),
                                                       "int4g16": (4, 16)}
"""The audit's ``(bits, group_size)``: int8 and int4 per output channel, int4 in groups of 16 inputs."""


def _grouped(weight: torch.Tensor, bits: int, group_size: Optional[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``weight`` ``[d_out, d_in]`` as float32 ``[d_out, groups, group]`` and its RTN scale ``[d_out, groups, 1]``."""
    if bits < 2:
        raise ValueError(f"bits must be >= 2, got {bits}")
    if weight.dim() != 2:
        raise ValueError(f"expected a 2-D weight [d_out, d_in], got shape {tuple(weight.shape)}")
    d_out, d_in = weight.shape
    group = group_size or d_in
    if d_in % group:
        raise ValueError(f"d_in {d_in} is not a multiple of group_size {group}")
    w = weight.detach().float().reshape(d_out, d_in // group, group)
    top = 2 ** (bits - 1) - 1
    return w, w.abs().amax(dim=-1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny) / top


def rtn_step(weight: torch.Tensor, bits: int, group_size: Optional[int] = None) -> torch.Tensor:
    """The RTN quantization step ``s`` of every entry of ``weight`` ``[d_out, d_in]`` (float32, same shape): the
    scale of the entry's row (per channel) or group; rounding moves an entry by at most ``s / 2``."""
    w, scale = _grouped(weight, bits, group_size)
    return scale.expand_as(w).reshape(weight.shape)


def quantize_rtn(weight: torch.Tensor, bits: int, group_size: Optional[int] = None) -> torch.Tensor:
    """Dequantized RTN copy of ``weight`` ``[d_out, d_in]`` (same shape and dtype; see module docstring)."""
    w, scale = _grouped(weight, bits, group_size)
    top = 2 ** (bits - 1) - 1
    q = torch.clamp(torch.round(w / scale), -top - 1, top)
    return (q * scale).reshape(weight.shape).to(weight.dtype)


def quantize_module_weight(module: nn.Module, scheme: Tuple[int, Optional[int]]) -> bool:
    """RTN-quantize ``module``'s weight in place when it is an ``nn.Linear`` or GPT-2 ``Conv1D`` (``scheme = (bits,
    group_size)``; per channel where the input width is not a multiple of the group); True when it did."""
    bits, group_size = scheme
    weight = getattr(module, "weight", None)
    if weight is None:
        return False
    if isinstance(module, nn.Linear):
        matrix = weight  # [d_out, d_in]
    elif type(module).__name__ == "Conv1D":
        matrix = weight.t()  # stored [d_in, d_out]
    else:
        return False
    group = group_size if group_size and matrix.shape[1] % group_size == 0 else None
    new = quantize_rtn(matrix, bits, group)
    with torch.no_grad():
        weight.copy_(new if isinstance(module, nn.Linear) else new.t())
    return True


def quantized_copy(model: nn.Module, scheme: Tuple[int, Optional[int]]) -> nn.Module:
    """A deep copy of ``model``, every ``nn.Linear`` / GPT-2 ``Conv1D`` weight but the head's RTN-quantized
    (:func:`quantize_module_weight`)."""
    twin = copy.deepcopy(model)
    head = twin.get_output_embeddings() if hasattr(twin, "get_output_embeddings") else None
    head_weight = getattr(head, "weight", None)
    for module in twin.modules():
        if getattr(module, "weight", None) is not None and module.weight is not head_weight:
            quantize_module_weight(module, scheme)
    return twin
