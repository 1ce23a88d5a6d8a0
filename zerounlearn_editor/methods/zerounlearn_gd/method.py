"""ZeroUnlearn-GD (many samples, additive) as an EasyEdit method: ``W' = W + E P_m`` per layer."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.pipeline import LayerProblem, apply_edit_method
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.solve import (
    nullspace_basis,
    protected_covariance,
    solve_exact,
    solve_gd,
)

GD_TOLERANCE = 1e-10
"""``solver: gd`` stops when the objective's relative change falls below this."""


def zerounlearn_gd_solver(hparams: ZeroUnlearnGDHyperParams):
    """The per-layer solve ``LayerProblem -> W + D_m`` (exact closed form or Adam).

    With ``retain_nullspace_weight > 0`` the null space is taken of ``C0`` plus the retain keys'
    second moment, with ``context_nullspace_weight > 0`` also plus the prompts' context keys'
    (:func:`~zerounlearn_editor.methods.zerounlearn_gd.solve.protected_covariance`); with
    ``forgotten_protection_weight > 0`` also plus that times ``sum k k^T`` over the forget keys of the model's
    earlier edits (``LayerProblem.S_prev``, lifelong unlearning).
    """

    def solve(problem: LayerProblem) -> torch.Tensor:
        protected = protected_covariance(
            problem.C0, problem.K_r, hparams.retain_nullspace_weight, problem.C_ctx, hparams.context_nullspace_weight,
            problem.S_prev, hparams.forgotten_protection_weight,
        )
        U0, _ = nullspace_basis(protected, hparams.nullspace_threshold)
        weights = dict(a=hparams.orthogonality_weight, b=hparams.target_weight, c=hparams.norm_weight)
        args = (problem.W, problem.K_f, problem.M_f, problem.M_n, U0)
        if hparams.solver == "exact":
            D_m = solve_exact(*args, **weights)
        else:
            D_m = solve_gd(*args, **weights, steps=hparams.gd_steps, lr=hparams.gd_lr, tolerance=GD_TOLERANCE)
        return problem.W + D_m.to(problem.W.dtype)

    return solve


def apply_zerounlearn_gd_to_model(
    model: nn.Module,
    tok,
    requests: Sequence[Mapping[str, Any]],
    hparams: ZeroUnlearnGDHyperParams,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """Unlearn ``requests`` with ZeroUnlearn-GD (EasyEdit's calling convention)."""
    if not isinstance(hparams, ZeroUnlearnGDHyperParams):
        raise TypeError(f"expected ZeroUnlearnGDHyperParams, got {type(hparams).__name__}")
    return apply_edit_method(
        model,
        tok,
        requests,
        hparams,
        zerounlearn_gd_solver(hparams),
        copy,
        return_orig_weights,
        keep_original_weight,
        **kwargs,
    )
