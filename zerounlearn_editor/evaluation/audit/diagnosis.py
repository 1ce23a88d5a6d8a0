"""Where a forgotten answer survives: the maths of the audit's diagnosis (issue 45 item 1), pure functions of tensors.

* multiple choice: :func:`first_and_rest` splits each option's summed answer log-probability into its first token
  and its later tokens, :func:`margin_split` says by how much the true answer beats its strongest rival and which
  part carries it; the per-layer lens ranks among the options are :func:`~.lens.option_ranks`;
* relearning: :func:`relative_change` (``||W' - W|| / ||W||``) and :func:`splice` (take some parameters from one
  state, the rest from another);
* int4: :func:`edit_against_quantization` compares an edit ``W' - W`` with the RTN step of ``W'``
  (:func:`~.quantize.rtn_step`) entry by entry, and its effect on keys ``(W' - W) k`` with the quantization
  error's ``(Q(W') - W') k``.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

import torch

from zerounlearn_editor.evaluation.audit.quantize import quantize_rtn, rtn_step


def first_and_rest(token_logp: torch.Tensor, target_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``token_logp`` ``[n, T]`` (each scored token's log-probability, anything elsewhere) and ``target_mask``
    ``[n, T]`` (True at scored tokens): per row the first scored token's log-probability and the sum over the
    later ones, two ``[n]`` tensors (a row with one scored token has rest 0)."""
    mask = target_mask.bool()
    if not bool(mask.any(dim=1).all()):
        raise ValueError("first_and_rest: a row has no scored token")
    first_pos = mask.int().argmax(dim=1)  # [n] the first True column
    first = token_logp.gather(1, first_pos[:, None]).squeeze(1)
    total = torch.where(mask, token_logp, torch.zeros_like(token_logp)).sum(dim=1)
    return first, total - first


def margin_split(first: torch.Tensor, rest: torch.Tensor) -> Dict[str, float]:
    """Option 0 (the true answer) against the other options, each scored ``first + rest`` (``[k]``, k >= 2).

    ``rival``: the best other option by total; ``margin`` = total(0) - total(rival) (> 0: option 0 wins), split
    exactly into ``first_margin`` + ``rest_margin``; ``wins``: option 0 beats every other; ``first_wins``: its first
    token alone beats every other's first token; ``carried_by``: for a win, ``"first"`` when the first-token margin
    against the rival is positive, else ``"later"`` (the later tokens turn the first token's loss into a win);
    ``None`` when option 0 does not win."""
    if first.shape != rest.shape or first.dim() != 1 or len(first) < 2:
        raise ValueError(f"margin_split: expected two [k] tensors with k >= 2, got {tuple(first.shape)}, "
                         f"{tuple(rest.shape)}")
    total = first + rest
    rival = 1 + int(total[1:].argmax())
    wins = bool((total[0] > total[1:]).all())
    first_margin = float(first[0] - first[rival])
    carried: Optional[str] = ("first" if first_margin > 0 else "later") if wins else None
    return {"rival": rival, "margin": float(total[0] - total[rival]), "first_margin": first_margin,
            "rest_margin": float(rest[0] - rest[rival]), "wins": wins,
            "first_wins": bool((first[0] > first[1:]).all()), "carried_by": carried}


def first_winning_layer(ranks: Sequence[int]) -> Optional[int]:
    """The first index whose rank is 0 (option 0 wins there), ``None`` if none."""
    return next((i for i, r in enumerate(ranks) if int(r) == 0), None)


def winning_from(ranks: Sequence[int]) -> Optional[int]:
    """The first index from which the rank stays 0 to the end (option 0 wins at every later layer, the output
    included), ``None`` when it does not win at the last index."""
    if not len(ranks) or int(ranks[-1]) != 0:
        return None
    start = len(ranks)
    while start > 0 and int(ranks[start - 1]) == 0:
        start -= 1
    return start


def relative_change(new: torch.Tensor, old: torch.Tensor) -> float:
    """``||new - old||_F / ||old||_F`` (in float64; ``inf`` when ``old`` is zero and ``new`` is not)."""
    diff = (new.double() - old.double()).norm()
    base = old.double().norm()
    if float(base) == 0.0:
        return 0.0 if float(diff) == 0.0 else float("inf")
    return float(diff / base)


def splice(primary: Mapping[str, torch.Tensor], secondary: Mapping[str, torch.Tensor],
           from_secondary: Sequence[str]) -> Dict[str, torch.Tensor]:
    """``primary``'s tensors, those named in ``from_secondary`` taken from ``secondary`` instead."""
    missing = sorted(set(from_secondary) - set(secondary) | set(from_secondary) - set(primary))
    if missing:
        raise KeyError(f"splice: {missing[:3]} not in both states")
    chosen = set(from_secondary)
    return {name: (secondary[name] if name in chosen else value) for name, value in primary.items()}


def _median(values: torch.Tensor) -> float:
    """The median of a 1-D tensor, the mean of the two middle values for an even count."""
    return float(torch.quantile(values.double(), 0.5))


def edit_against_quantization(old: torch.Tensor, new: torch.Tensor, keys: torch.Tensor, bits: int = 4,
                              group_size: Optional[int] = 16) -> Dict[str, float]:
    """An edit ``new - old`` (``[d_out, d_in]``) against RTN quantization of ``new`` (``bits``, ``group_size``).

    Per entry: ``frac_below_half_step`` = the fraction of the edit's nonzero entries smaller in magnitude than half
    the entry's quantization step (rounding can move such an entry back past its old value);
    ``median_edit_over_step`` = the median of ``|new - old| / step`` over the nonzero entries.
    Per key (``keys`` ``[d_in, n]``): ``edit_effect`` ``||(new - old) k||``, ``quant_error`` ``||(Q(new) - new) k||``;
    ``median_effect_over_error`` their ratio's median, ``frac_keys_effect_below_error`` the fraction of keys where
    the quantization error's effect is larger than the edit's; ``median_edit_effect`` / ``median_quant_error`` the
    two norms' medians; ``effect_over_error``: the ratio per key (a list of ``n``)."""
    if old.shape != new.shape or keys.dim() != 2 or keys.shape[0] != old.shape[1]:
        raise ValueError(f"edit_against_quantization: shapes {tuple(old.shape)}, {tuple(new.shape)}, "
                         f"{tuple(keys.shape)} do not fit [d_out, d_in], [d_out, d_in], [d_in, n]")
    delta = new.double() - old.double()
    step = rtn_step(new, bits, group_size).double()
    changed = delta != 0
    ratio = (delta.abs() / step)[changed]
    k = keys.double()
    effect = (delta @ k).norm(dim=0)  # [n]
    error = ((quantize_rtn(new.float(), bits, group_size).double() - new.double()) @ k).norm(dim=0)  # [n]
    effect_over_error = effect / error.clamp(min=torch.finfo(torch.float64).tiny)
    return {
        "frac_below_half_step": float((ratio < 0.5).double().mean()) if len(ratio) else 0.0,
        "median_edit_over_step": _median(ratio) if len(ratio) else 0.0,
        "median_edit_effect": _median(effect),
        "median_quant_error": _median(error),
        "median_effect_over_error": _median(effect_over_error),
        "frac_keys_effect_below_error": float((effect < error).double().mean()),
        "effect_over_error": effect_over_error.tolist(),
    }
