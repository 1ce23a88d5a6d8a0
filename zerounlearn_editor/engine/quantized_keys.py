"""Forget keys read on a quantized copy of the model (``quantized_forget_keys``, opt-in).

Rounding the layers before an edit moves the forget keys an edited layer sees (SmolLM2, per-channel int4: by
68-83% of their norm at layers 12-18), and an edit made for the exact keys keeps only part of its effect on the
moved ones (benchmarks/RESULTS.md §7, "Why rm-r8 lets int4 per channel back"). With this experiment the solve of
every edited layer also gets, for every forget request, the key ``k_q`` read on a **twin**: a deep copy of the
model with every linear weight but the head RTN-rounded by the audit's quantizer
(:mod:`zerounlearn_editor.evaluation.audit.quantize`). Its value target is ``W k_q`` plus the request's own
residual change (through the post-MLP map where there is one), so the edit is asked to move ``W' k_q`` by the same
amount as ``W' k``: the change ``dW k_q`` the diagnosis measured against ``dW k``.

Which model the twin rounds: the twin is made once, from the unedited model, before the first layer's keys are
read, and after each layer's write-back that layer's new weight is copied into it and rounded again
(:meth:`QuantizedTwin.sync`). Layers are edited in increasing order and a layer's keys depend only on the layers
below it (and its own attention / MLP input projections, which the edit never changes), so the keys the twin gives
at layer ``l`` are exactly the keys the rounded **final** edited model computes there. What stays an
approximation is the target: the residual change is the one optimised on the unrounded model, not one optimised on
the rounded model.

The twin is a separate model (its own parameters, freed by :meth:`QuantizedTwin.close`); the edited model's
weights are only read from it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.hparams import QUANTIZED_KEYS, EditHyperParams
from zerounlearn_editor.engine.keys import LayerReadout
from zerounlearn_editor.engine.prefix_replay import LayerPrefixReplay
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES, quantize_module_weight, quantized_copy
from zerounlearn_editor.support.memory import release_free_memory
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix, set_weight_matrix


def with_quantized_columns(K_f: torch.Tensor, M_n: torch.Tensor, K_q: torch.Tensor, M_q: torch.Tensor,
                           weight: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """The forget keys and value targets with the quantized twin's appended: ``K_f`` ``[d_in, n]`` and ``K_q``
    ``[d_in, n]`` give ``[d_in, 2n]`` (originals first, column ``n + i`` request ``i``'s twin key), ``M_n`` and
    ``M_q`` ``[d_out, n]`` give ``[d_out, 2n]``. The appended columns are scaled by ``sqrt(weight)`` (keys and
    targets alike), so each weighs ``weight`` times an original in the target term ``||W' K - M||^2``; in
    ZeroUnlearn-GD's orthogonality term ``||M_f^T W' K_f||^2`` (``M_f = W K_f`` of the scaled keys) a pair of twin
    columns weighs ``weight^2`` and a mixed pair ``weight``."""
    if K_q.shape != K_f.shape or M_q.shape != M_n.shape or K_f.shape[1] != M_n.shape[1]:
        raise ValueError(f"quantized keys / targets {tuple(K_q.shape)} / {tuple(M_q.shape)} do not match the forget "
                         f"keys / targets {tuple(K_f.shape)} / {tuple(M_n.shape)}")
    scale = math.sqrt(weight)
    return torch.cat([K_f, scale * K_q], dim=1), torch.cat([M_n, scale * M_q], dim=1)


class QuantizedTwin:
    """The rounded copy of the model being edited (module docstring): ``read`` gives the forget keys on it,
    ``sync`` rounds a freshly edited weight into it, ``close`` frees it."""

    def __init__(self, model: nn.Module, hparams: EditHyperParams, replay: bool):
        setting = quantized_keys_setting(hparams)
        assert setting is not None, "QuantizedTwin needs quantized_forget_keys"
        self.scheme: Tuple[int, Optional[int]] = QUANT_SCHEMES[setting["scheme"]]
        self.weight = float(setting["weight"])
        self.model: Optional[nn.Module] = quantized_copy(model, self.scheme)
        self.model.eval()
        self.replay: Optional[LayerPrefixReplay] = None
        if replay and len(hparams.layers) > 1:  # the layers below the first edited one never change in the twin
            self.replay = LayerPrefixReplay(self.model, hparams.layer_module_tmp, min(hparams.layers))

    def read(self, read_keys: Any, tok: Any, forget: Sequence[Any], prefixes: Sequence[str], key_module: str,
             hidden_module: str, fact_token: str, chunk_size: int, layer: Optional[int] = None) -> LayerReadout:
        """``read_keys`` (the edit's keys stage) of the forget requests on the twin: ``keys`` ``[d_in, n]``; with
        the replay (the built-in stage) no hidden state (``hidden`` ``[0, 0]``: the solve uses the twin's keys
        only) and, given the edited ``layer`` being read, the replay advances to it
        (:meth:`~zerounlearn_editor.engine.prefix_replay.LayerPrefixReplay.store_next`)."""
        if self.replay is None:
            return read_keys(self.model, tok, forget, prefixes, key_module, hidden_module, fact_token, chunk_size)
        if layer is not None:
            self.replay.store_next(layer)
        readout = read_keys(self.model, tok, forget, prefixes, key_module, hidden_module, fact_token, chunk_size,
                            prefix_replay=self.replay, hidden_rows=0)
        self.replay.advance()
        return readout

    def sync(self, module_name: str, source: nn.Module) -> None:
        """Copy ``source``'s weight (the edited module) into the twin's module ``module_name`` and round it."""
        target = get_module(self.model, module_name)
        set_weight_matrix(target, get_weight_matrix(source).detach())
        quantize_module_weight(target, self.scheme)

    def clear_replay(self) -> None:
        """Free the replay's stored outputs (after the last layer's read, as the edited model's replay)."""
        if self.replay is not None:
            self.replay.clear()

    def close(self) -> None:
        """Free the twin (and its replay's stored outputs)."""
        self.clear_replay()
        self.model = None
        self.replay = None
        release_free_memory()


def quantized_keys_setting(hparams: EditHyperParams) -> Optional[Dict[str, Any]]:
    """The ``quantized_forget_keys`` setting ``{scheme, weight}`` of ``hparams``; None when it is not set or the
    method's class does not declare the key (ZeroUnlearn: an attribute set on its object is not read)."""
    if QUANTIZED_KEYS not in {f.name for f in dataclasses.fields(hparams)}:
        return None
    return getattr(hparams, QUANTIZED_KEYS) or None


def forget_columns_per_request(hparams: EditHyperParams) -> int:
    """How many forget columns the solve gets per request: 2 with ``quantized_forget_keys`` (the key and its twin's),
    else 1. A layer's change has rank at most this times the method's rank per column (the bound
    ``unlearn --save adapter`` exports)."""
    return 2 if quantized_keys_setting(hparams) else 1


def quantized_twin(model: nn.Module, hparams: EditHyperParams, replay: bool) -> Optional[QuantizedTwin]:
    """The edit's :class:`QuantizedTwin` when ``quantized_forget_keys`` is set, else None."""
    if not quantized_keys_setting(hparams):
        return None
    return QuantizedTwin(model, hparams, replay)
