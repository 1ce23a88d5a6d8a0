"""ZeroUnlearn (few-shot, multiplicative) as an EasyEdit method: ``W' = D W`` per layer.

Capacity limit: the projector removes ``rank(M_f)`` of the layer's ``d_out`` output directions. Past
:data:`RANK_WARN_FRACTION` of ``d_out`` the edit warns; at :data:`RANK_REFUSE_FRACTION` it refuses and
points to ZeroUnlearn-GD, which has no such limit. The request count is checked before anything runs,
``rank(M_f)`` at every layer during the solve (an error there restores every edited weight).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.pipeline import LayerProblem, apply_edit_method, as_edit_plan
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn.solve import forget_value_basis, zerounlearn_multiplier
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

LOG = logging.getLogger(__name__)

RANK_WARN_FRACTION = 0.10
"""Warn when the forget values span more than this fraction of a layer's output space."""
RANK_REFUSE_FRACTION = 0.50
"""Refuse when they span at least this fraction (the projector would erase most of the layer)."""


class CapacityError(ValueError):
    """Too many independent facts for ZeroUnlearn's projector at one layer (use ZeroUnlearn-GD)."""


def check_capacity(rank: int, d_out: int, where: str, refuse: bool = True) -> None:
    """Warn or raise :class:`CapacityError` for a projector removing ``rank`` of ``d_out`` directions.

    ``refuse=False`` (``allow_large_batch=True``, timing runs) only warns.
    """
    fraction = rank / d_out
    message = (
        f"{where}: the forget values span rank(M_f) = {rank} of the layer's d_out = {d_out} output directions; "
        f"ZeroUnlearn's projector removes {fraction:.0%} of the layer's output space"
    )
    if fraction >= RANK_REFUSE_FRACTION and refuse:
        raise CapacityError(
            f"{message} (limit {RANK_REFUSE_FRACTION:.0%}: at 100% the weight becomes exactly 0). Forget fewer facts "
            "per edit, or use ZeroUnlearn-GD (apply_zerounlearn_gd_to_model, hparams/ZeroUnlearn-GD/), made for many "
            "samples"
        )
    if fraction > RANK_WARN_FRACTION:
        LOG.warning("%s; the edit degrades the layer accordingly (ZeroUnlearn-GD suits large batches)", message)


def check_request_capacity(model: nn.Module, hparams: ZeroUnlearnHyperParams, n: int) -> None:
    """Refuse ``n`` requests whose forget values could span half of an edited layer's ``d_out`` (before any work).

    ``rank(M_f) <= min(n, d_out)``; the message gives that bound, never more than ``d_out``. The edited modules
    must have been checked (:func:`~zerounlearn_editor.engine.pipeline.check_edit_inputs`).
    """
    for layer in hparams.layers:
        d_out = get_weight_matrix(get_module(model, hparams.rewrite_module_tmp.format(layer))).shape[0]
        bound = min(n, d_out)
        if bound / d_out >= RANK_REFUSE_FRACTION:
            check_capacity(bound, d_out, f"{n} requests at layer {layer} (rank(M_f) <= min(n, d_out) = {bound})")


def zerounlearn_solver(hparams: ZeroUnlearnHyperParams, allow_large_batch: bool = False):
    """The per-layer solve ``LayerProblem -> D W`` (float64) with the hparams' weights (the paper's ``D``)."""

    def solve(problem: LayerProblem) -> torch.Tensor:
        rank = forget_value_basis(problem.M_f, hparams.projection_rank_tol).shape[1]
        check_capacity(rank, problem.W.shape[0], f"layer {problem.layer}", refuse=not allow_large_batch)
        D = zerounlearn_multiplier(
            problem.W,
            problem.K_f,
            problem.M_n,
            problem.C0,
            forget_weight=hparams.forget_weight,
            utility_weight=hparams.utility_weight,
            regularization=hparams.regularization,
            rank_tol=hparams.projection_rank_tol,
        )
        return D @ problem.W.double()  # W' = D W, float64

    return solve


def apply_zerounlearn_to_model(
    model: nn.Module,
    tok,
    requests: Sequence[Mapping[str, Any]],
    hparams: ZeroUnlearnHyperParams,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """Unlearn ``requests`` from ``model`` with ZeroUnlearn (EasyEdit's calling convention).

    Returns ``(edited model, weights_copy)``; see :func:`zerounlearn_editor.engine.pipeline.apply_edit_method`.
    Raises :class:`CapacityError` when the forget values would span half of a layer's output
    space (see the module docstring); ``allow_large_batch=True`` only warns (timing runs).
    """
    if not isinstance(hparams, ZeroUnlearnHyperParams):
        raise TypeError(f"expected ZeroUnlearnHyperParams, got {type(hparams).__name__}")
    allow_large_batch = bool(kwargs.pop("allow_large_batch", False))
    plan = as_edit_plan(model, tok, requests, hparams, kwargs.get("retain"))  # the one check of this edit
    if not allow_large_batch:  # before any statistics, targets or copy: rank(M_f) <= n
        check_request_capacity(model, hparams, len(plan.forget))
    return apply_edit_method(
        model, tok, plan, hparams, zerounlearn_solver(hparams, allow_large_batch), copy, return_orig_weights,
        keep_original_weight, **kwargs
    )
