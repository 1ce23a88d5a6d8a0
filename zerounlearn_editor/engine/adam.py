"""The one Adam loop of the neutral targets (the paper's), shared by both evaluations of the loss.

One residual ``delta_i`` ``[d]`` per request, Adam on the sum of the active requests' losses; a request stops
(its delta frozen) once its target NLL falls below ``early_stop_loss``, and every delta is clamped to
``clamp_norm_factor * |h0_i|`` after each step.
"""
from __future__ import annotations

import logging
from typing import List, Protocol, Tuple

import torch

from zerounlearn_editor.support.progress import progress_bar

LOG = logging.getLogger(__name__)


class TargetProblem(Protocol):
    """What the loop needs from an evaluation of the loss."""

    n: int  # requests
    d: int  # hidden size
    h0: torch.Tensor  # [n, d] float32: the unedited hidden state at each request's lookup token

    def loss_and_grad(self, reqs: torch.Tensor, delta: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss [k], nll [k], grad [k, d])`` of requests ``reqs`` ``[k]`` with every request's residual
        ``delta`` ``[n, d]`` (float32, on ``h0``'s device). The first call covers every request at ``delta = 0``."""


def held_back(problem: TargetProblem, rank_limit: int) -> torch.Tensor:
    """``[n]`` bool: the requests that take no step under ``suppress_rank_limit``: their answer's
    first token ranks above ``rank_limit`` after the bare prompt (``problem.answer_ranks`` ``[n]``, read at the
    first evaluation), so their residual stays 0 and the solve keeps their values."""
    ranks = getattr(problem, "answer_ranks", None)
    if ranks is None:
        raise RuntimeError(f"{type(problem).__name__} gives no answer ranks, which suppress_rank_limit needs")
    return ranks.cpu() > rank_limit


def adam_targets(problem: TargetProblem, cfg) -> Tuple[torch.Tensor, torch.Tensor, List[int]]:
    """``(delta [n, d], nll [n], steps_run)``: each request's residual, its target NLL at its last evaluation and
    the Adam steps it took. ``cfg``: a :class:`~zerounlearn_editor.engine.targets.TargetConfig`."""
    n, device = problem.n, problem.h0.device
    delta = torch.zeros((n, problem.d), device=device, dtype=torch.float32, requires_grad=True)
    optimiser = torch.optim.Adam([delta], lr=cfg.lr)
    max_norm = cfg.clamp_norm_factor * problem.h0.norm(dim=1)
    active = torch.ones(n, dtype=torch.bool, device=device)
    steps_run = [0] * n
    nll_all = torch.zeros(n, device=device)
    bar = progress_bar(total=cfg.steps, desc=f"neutral targets ({n} facts)", unit="step")
    for step in range(cfg.steps + 1):
        reqs = torch.nonzero(active).flatten()
        loss, nll, grad = problem.loss_and_grad(reqs, delta.detach())
        nll_all[reqs] = nll
        converged = nll < cfg.early_stop_loss
        if step == 0 and cfg.step_rank_limit is not None:
            converged = converged | held_back(problem, cfg.step_rank_limit)[reqs.cpu()].to(device)
        active[reqs[converged]] = False
        if step == cfg.steps or not bool(active.any()):
            break
        bar.update(1)
        bar.set_postfix(active=int(active.sum()), max_nll=f"{float(nll.max()):.3f}", refresh=False)
        keep = ~converged
        for i in reqs[keep].tolist():
            steps_run[i] += 1
        full_grad = torch.zeros_like(delta)
        full_grad[reqs[keep]] = grad[keep]
        delta.grad = full_grad
        frozen = delta.detach()[~active].clone()
        optimiser.step()
        with torch.no_grad():
            delta[~active] = frozen
            norms = delta.norm(dim=1)
            scale = torch.where(norms > max_norm, max_norm / norms.clamp_min(1e-12), torch.ones_like(norms))
            delta.mul_(scale[:, None])
        if step % 5 == 0:
            LOG.debug("target step %d: nll %s", step, nll.detach().cpu().tolist())
    bar.close()
    return delta.detach(), nll_all, steps_run
