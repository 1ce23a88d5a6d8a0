"""NPO baseline: negative preference optimisation (Zhang et al. 2024), EasyEdit calling convention.

Per request with answer ``y`` to prompt ``x`` and summed answer log-probabilities
``logp = log pi_theta(y|x)`` (current weights) and ``ref = log pi_ref(y|x)`` (unedited
weights, computed once before training)::

    L = (2 / beta) * log(1 + (pi_theta(y|x) / pi_ref(y|x)) ** beta)
      = -(2 / beta) * logsigmoid(-beta * (logp - ref))

averaged over the requests. At the start ``L = (2/beta) log 2``; it decreases towards 0 as
the answers become less likely than under the reference, with gradients that fade out
(unlike GA's), which is NPO's point. As ``beta -> 0`` it tends to GA on the summed log-prob.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from zerounlearn_editor.methods.baselines.hparams import NPOHyperParams
from zerounlearn_editor.methods.baselines.training import apply_baseline

__all__ = ["npo_loss", "apply_npo_to_model"]


def npo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """NPO loss (scalar): mean over requests of ``-(2/beta) logsigmoid(-beta (logp - ref_logp))``.

    Args:
        logp: summed answer log-probability per request ``[n]`` under the current weights.
        ref_logp: the same under the reference (unedited) weights ``[n]``.
        beta: inverse temperature, > 0.
    """
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    return (-(2.0 / beta) * F.logsigmoid(-beta * (logp - ref_logp))).mean()


def apply_npo_to_model(
    model: nn.Module,
    tok,
    requests: Sequence[Mapping[str, Any]],
    hparams: NPOHyperParams,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """Unlearn ``requests`` with NPO; returns ``(model, weights_copy)``.

    See :func:`zerounlearn_editor.methods.baselines.training.apply_baseline` for the arguments.
    """
    if not isinstance(hparams, NPOHyperParams):
        raise TypeError(f"expected NPOHyperParams, got {type(hparams).__name__}")
    beta = hparams.beta

    def objective(logp: torch.Tensor, ref_logp: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
        del n_tokens
        return npo_loss(logp, ref_logp, beta)

    return apply_baseline(
        model, tok, requests, hparams, objective, copy, return_orig_weights, keep_original_weight, **kwargs
    )
