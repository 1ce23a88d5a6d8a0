"""ZeroUnlearn-GD (many samples, additive) as an EasyEdit method: ``W' = W + E P_m`` per layer."""
from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.pipeline import EditReport, LayerProblem, apply_edit_method, as_edit_plan
from zerounlearn_editor.engine.quantized_keys import forget_columns_per_request
from zerounlearn_editor.engine.stats.eigen_cache import EigenCache, eigen_cache_of
from zerounlearn_editor.methods.zerounlearn_gd.config import KEY_REACH, ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.repair import run_repair_rounds
from zerounlearn_editor.methods.zerounlearn_gd.solve import (
    key_reach,
    null_eigenpairs,
    nullspace_with_eigenvalues,
    protected_covariance,
    relative_text_weight,
    solve_exact,
    solve_gd,
    symmetric_eigenpairs,
    text_weighted_basis,
)

LOG = logging.getLogger(__name__)

GD_TOLERANCE = 1e-10
"""``solver: gd`` stops when the objective's relative change falls below this."""

MANY_FACTS = 50
"""Above this many facts in one edit with ``orthogonality_weight > 0`` a warning points to ``<model>-many.yaml``: the
orthogonality term ``a ||M_f^T X||^2`` sums over pairs of facts, so its pull on the values grows with n (SmolLM2,
CounterFact, the paper YAML: WikiText-2 PPL +6% at 50 facts, +16% at 100, +41% at 500; with answer-suppression
targets +6% at 200 and +290% at 1,000, against +0.4-0.7% at 1,000 without the term; benchmarks/RESULTS.md, "Scale")."""


def many_facts_warning(n: int, hparams: ZeroUnlearnGDHyperParams) -> Optional[str]:
    """The warning for an edit of ``n`` facts with ``hparams`` (None when there is nothing to say)."""
    if n <= MANY_FACTS or hparams.orthogonality_weight <= 0:
        return None
    return (f"ZeroUnlearn-GD: {n} facts in one edit with orthogonality_weight {hparams.orthogonality_weight:g}: that "
            "term's cost to fluency grows with the square of the number of facts (measured on SmolLM2: PPL +16% at "
            "100 facts, +41% at 500 with the paper's YAML); for more than "
            f"{MANY_FACTS} facts use hparams/ZeroUnlearn-GD/<model>-many.yaml (orthogonality_weight 0) or batches of "
            f"at most {MANY_FACTS}")


def nullspace_of_problem(problem: LayerProblem, hparams: ZeroUnlearnGDHyperParams,
                         cache: Optional[EigenCache]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(U0, e0)``: the null space ``U0`` ``[d_in, r]`` of the protected matrix
    (:func:`~zerounlearn_editor.methods.zerounlearn_gd.solve.protected_covariance`) and its eigenvalues ``e0``
    ``[r]``. When that is ``C0`` itself (no retain or context term) its eigenpairs come from ``cache`` (the same bits
    as computing them), if given; with a retain or context term ``e0`` are the protected matrix's eigenvalues."""
    protected = protected_covariance(
        problem.C0, problem.K_r, hparams.retain_nullspace_weight, problem.C_ctx, hparams.context_nullspace_weight,
    )
    if cache is None or protected is not problem.C0:
        return nullspace_with_eigenvalues(protected, hparams.nullspace_threshold)
    return null_eigenpairs(*cache.eigenpairs(protected, symmetric_eigenpairs), hparams.nullspace_threshold)


def solve_basis(problem: LayerProblem, hparams: ZeroUnlearnGDHyperParams, cache: Optional[EigenCache],
                held: Optional[Dict[str, float]] = None) -> torch.Tensor:
    """The basis the solve is given: ``U0`` of :func:`nullspace_of_problem`, its columns scaled by
    :func:`~zerounlearn_editor.methods.zerounlearn_gd.solve.text_weighted_basis` when
    ``nullspace_text_weight`` is set (the text-weighted penalty): with the number ``w``, or with
    ``{key_reach: A}`` the ``w`` of :func:`edit_text_weight` (``held``: the edit's weight, kept between its
    layers)."""
    U0, e0 = nullspace_of_problem(problem, hparams, cache)
    text_weight = hparams.nullspace_text_weight
    if not text_weight:
        return U0
    if isinstance(text_weight, Mapping):
        text_weight = edit_text_weight(problem, U0, e0, hparams, float(text_weight[KEY_REACH]),
                                       {} if held is None else held)
    return text_weighted_basis(U0, e0, text_weight, hparams.nullspace_threshold)


def edit_text_weight(problem: LayerProblem, U0: torch.Tensor, e0: torch.Tensor, hparams: ZeroUnlearnGDHyperParams,
                     reach: float, held: Dict[str, float]) -> float:
    """``nullspace_text_weight: {key_reach: reach}``: the edit's ``w``, set at its first edited layer
    (``hparams.layers[0]``, where the forget keys have the least null-space energy on the models measured) as
    :func:`~zerounlearn_editor.methods.zerounlearn_gd.solve.relative_text_weight` of the forget keys
    ``problem.K_f`` on ``U0`` ``[d_in, r]`` with the text variances ``e0`` ``[r]`` over the threshold, stored in
    ``held`` and kept for the later layers (a layer that comes without a stored weight sets its own). Logged per
    layer with the keys' reach."""
    Kt = U0.to(torch.float64).T @ problem.K_f.to(torch.float64)
    x = (e0.to(torch.float64) / hparams.nullspace_threshold).clamp_min(0.0)
    b, c = hparams.target_weight, hparams.norm_weight
    facts = problem.K_f.shape[1] // forget_columns_per_request(hparams)
    if problem.layer == hparams.layers[0] or "w" not in held:
        held["w"] = relative_text_weight(Kt, x, reach, b, c, facts)
        how = "set here"
    else:
        how = "kept"
    w = held["w"]
    reached = key_reach(Kt, x, w, b, c, facts)
    LOG.info("ZeroUnlearn-GD layer %d: text weight %.4g (%s; key reach asked %g, here %.4g at w = 0 and %.4g at w)",
             problem.layer, w, how, reach, key_reach(Kt, x, 0.0, b, c, facts), reached)
    if how == "set here" and reached > reach * (1.0 + 1e-6):
        LOG.warning("ZeroUnlearn-GD layer %d: no text weight up to %.3g brings the key reach down to %g (it stays "
                    "%.4g: the forget keys' null-space energy lies on directions without text variance)",
                    problem.layer, w, reach, reached)
    return w


def zerounlearn_gd_solver(hparams: ZeroUnlearnGDHyperParams):
    """The per-layer solve ``LayerProblem -> W + D_m`` (exact closed form or Adam).

    With ``retain_nullspace_weight > 0`` the null space is taken of ``C0`` plus the retain keys'
    second moment, with ``context_nullspace_weight > 0`` also plus the prompts' context keys'
    (:func:`~zerounlearn_editor.methods.zerounlearn_gd.solve.protected_covariance`); without them, the
    eigendecomposition of ``C0`` is cached beside the statistics (``{stats_dir}/nullspace_eigh``,
    :mod:`~zerounlearn_editor.engine.stats.eigen_cache`). ``nullspace_text_weight`` weights each null
    direction's penalty by its text variance (:func:`solve_basis`), for either solver; its ``{key_reach: A}`` form
    sets the weight at the edit's first layer and keeps it for the others (held by this solve, reset at that layer).
    """
    held: Dict[str, float] = {}

    def solve(problem: LayerProblem) -> torch.Tensor:
        U0 = solve_basis(problem, hparams, eigen_cache_of(hparams.stats_dir), held)
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
    plan = as_edit_plan(model, tok, requests, hparams, kwargs.get("retain"))  # the one check of this edit
    warning = many_facts_warning(len(plan.forget), hparams)
    if warning:
        LOG.warning(warning)
    rounds = hparams.repair_rounds
    if not rounds:
        return apply_edit_method(model, tok, plan, hparams, zerounlearn_gd_solver(hparams), copy, return_orig_weights,
                                 keep_original_weight, **kwargs)
    report = kwargs.get("report")
    if not isinstance(report, EditReport):
        report = EditReport()
    # the first edit's answer check is left to the rounds, which score the requests on the model they leave
    model, original = apply_edit_method(model, tok, plan, hparams, zerounlearn_gd_solver(hparams), copy, True,
                                        keep_original_weight, **dict(kwargs, report=report, answer_check=False))
    run_repair_rounds(model, tok, plan, lambda: zerounlearn_gd_solver(hparams), rounds, kwargs, original, report)
    return model, (original if return_orig_weights else {})
