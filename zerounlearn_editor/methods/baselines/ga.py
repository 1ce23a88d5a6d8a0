"""GA baseline: gradient ascent on the forget answers (EasyEdit calling convention).

Loss to minimise: the token-mean log-likelihood of the answer tokens of all requests,
``sum_i log pi_theta(y_i|x_i) / sum_i |y_i|`` (the negated usual NLL), so each step pushes
the answers' probability down. It is unbounded below; ``num_steps`` and ``lr`` decide how far.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.methods.baselines.hparams import GAHyperParams
from zerounlearn_editor.methods.baselines.training import apply_baseline, nll_loss

__all__ = ["ga_loss", "apply_ga_to_model"]


def ga_loss(logp: torch.Tensor, ref_logp: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """Gradient-ascent loss (scalar) = minus the token-mean NLL.

    Args:
        logp: summed answer log-probability per request ``[n]`` under the current weights.
        ref_logp: the same under the unedited weights ``[n]`` (unused by GA).
        n_tokens: answer tokens per request ``[n]``.
    """
    del ref_logp
    return -nll_loss(logp, n_tokens)


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
    """Unlearn ``requests`` by gradient ascent; returns ``(model, weights_copy)``.

    See :func:`zerounlearn_editor.methods.baselines.training.apply_baseline` for the arguments.
    """
    if not isinstance(hparams, GAHyperParams):
        raise TypeError(f"expected GAHyperParams, got {type(hparams).__name__}")
    return apply_baseline(
        model, tok, requests, hparams, ga_loss, copy, return_orig_weights, keep_original_weight, **kwargs
    )
