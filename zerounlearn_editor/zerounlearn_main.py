"""ZeroUnlearn (few-shot, multiplicative) as an EasyEdit method: ``W' = D W`` per layer."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Tuple

import torch
from torch import nn

from .hparams import ZeroUnlearnHyperParams
from .linalg.zerounlearn import apply_multiplier, zerounlearn_multiplier
from .pipeline import LayerProblem, apply_edit_method

__all__ = ["zerounlearn_solver", "apply_zerounlearn_to_model"]


def zerounlearn_solver(hparams: ZeroUnlearnHyperParams):
    """The per-layer solve ``LayerProblem -> D W`` with the hparams' weights.

    With retain weights set (``retain_weight``, ``projection_retain_weight``,
    ``projection_utility_weight``) the retain keys ``problem.K_r`` enter ``D0`` and the projector
    (see :mod:`zerounlearn_editor.linalg.zerounlearn`); all 0 gives the paper's ``D``.
    """
    retain_aware = any(value > 0 for value in hparams.retain_weights().values())

    def solve(problem: LayerProblem) -> torch.Tensor:
        retain = {}
        if retain_aware:
            retain = dict(
                K_r=problem.retain_keys(),
                retain_weight=hparams.retain_weight,
                projection_retain_weight=hparams.projection_retain_weight,
                projection_utility_weight=hparams.projection_utility_weight,
            )
        D = zerounlearn_multiplier(
            problem.W,
            problem.K_f,
            problem.M_n,
            problem.C0,
            forget_weight=hparams.forget_weight,
            utility_weight=hparams.utility_weight,
            regularization=hparams.regularization,
            projection_eps=hparams.projection_eps,
            rank_tol=hparams.projection_rank_tol,
            **retain,
        )
        return apply_multiplier(D, problem.W)

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

    Returns ``(edited model, weights_copy)``; see :func:`zerounlearn_editor.pipeline.apply_edit_method`.
    """
    if not isinstance(hparams, ZeroUnlearnHyperParams):
        raise TypeError(f"expected ZeroUnlearnHyperParams, got {type(hparams).__name__}")
    return apply_edit_method(
        model, tok, requests, hparams, zerounlearn_solver(hparams), copy, return_orig_weights, keep_original_weight, **kwargs
    )
