"""GA and NPO: their forget losses and their apply functions (EasyEdit calling convention).

GA (gradient ascent) minimises the token-mean log-likelihood of the answer tokens,
``sum_i log pi_theta(y_i|x_i) / sum_i |y_i|``; it is unbounded below (``num_steps`` and ``lr``
decide how far it goes). NPO (Zhang et al. 2024) minimises, averaged over the requests,
``-(2 / beta) * logsigmoid(-beta * (logp - ref))`` with ``logp = log pi_theta(y|x)`` and
``ref = log pi_ref(y|x)`` (the unedited weights): ``(2/beta) log 2`` at the start, its gradients
fade out as the answers become less likely than under the reference.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from zerounlearn_editor.methods.baselines.config import GAHyperParams, NPOHyperParams
from zerounlearn_editor.methods.baselines.training import apply_baseline, nll_loss


def ga_loss(logp: torch.Tensor, ref_logp: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """Minus the token-mean NLL (scalar); ``logp``, ``ref_logp`` (unused), ``n_tokens``: ``[n]``."""
    del ref_logp
    return -nll_loss(logp, n_tokens)


def npo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """Mean over requests of ``-(2/beta) logsigmoid(-beta (logp - ref_logp))``; inputs ``[n]``."""
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    return (-(2.0 / beta) * F.logsigmoid(-beta * (logp - ref_logp))).mean()


def apply_ga_to_model(
    model: nn.Module,
    tok,
    requests: Sequence[Mapping[str, Any]],
    hparams: GAHyperParams,
    copy: bool = False,
    return_orig_weights: bool = False,
    keep_original_weight: bool = False,
    **kwargs: Any,
) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """Unlearn ``requests`` by gradient ascent; arguments and result as :func:`.training.apply_baseline`."""
    if not isinstance(hparams, GAHyperParams):
        raise TypeError(f"expected GAHyperParams, got {type(hparams).__name__}")
    return apply_baseline(
        model, tok, requests, hparams, ga_loss, copy, return_orig_weights, keep_original_weight, **kwargs
    )


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
    """Unlearn ``requests`` with NPO; arguments and result as :func:`.training.apply_baseline`."""
    if not isinstance(hparams, NPOHyperParams):
        raise TypeError(f"expected NPOHyperParams, got {type(hparams).__name__}")
    beta = hparams.beta

    def objective(logp: torch.Tensor, ref_logp: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
        del n_tokens
        return npo_loss(logp, ref_logp, beta)

    return apply_baseline(
        model, tok, requests, hparams, objective, copy, return_orig_weights, keep_original_weight, **kwargs
    )
