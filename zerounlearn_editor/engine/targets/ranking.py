"""``rank_below_alternatives`` (opt-in): the forgotten answer's first token ranked below its alternatives.

At each rewriting row's answer position (the prompt's last token, the position that predicts the first target
token) the term is ``relu(z_answer - mean_j z_alt_j + margin)`` over the logits ``z``: zero once the answer's
log-probability is ``margin`` nats below the mean log-probability of the request's alternatives (log-probability
differences at one position are logit differences). A request's alternatives are the first tokens of the *other*
requests' answers in the same edit (its own first token excluded), the ``k`` of them the unedited model finds most
likely at the request's answer positions: the relation's answers where the edit forgets several facts of one
relation. They never include an audit's multiple-choice distractors, which never name a forgotten answer.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

from zerounlearn_editor.engine.encoding import target_token_ids
from zerounlearn_editor.engine.hparams import RANK_KEY
from zerounlearn_editor.engine.requests import ForgetRequest


def rank_below_loss(logits: torch.Tensor, answer: torch.Tensor, alternatives: torch.Tensor,
                    margin: float) -> torch.Tensor:
    """Per entry ``[e]``: ``relu(z[answer] - mean_j z[alternatives_j] + margin)``.

    ``logits`` ``[e, vocab]`` at answer positions; ``answer`` ``[e]`` the forgotten answer's first token;
    ``alternatives`` ``[e, k]`` token ids, ``-1`` = padding (an entry with none gives 0)."""
    z_answer = logits.gather(1, answer[:, None]).squeeze(1)
    valid = alternatives >= 0
    z_alt = logits.gather(1, alternatives.clamp_min(0))
    count = valid.sum(1)
    mean_alt = (z_alt * valid).sum(1) / count.clamp_min(1)
    loss = torch.relu(z_answer - mean_alt + margin)
    return torch.where(count > 0, loss, torch.zeros_like(loss))


def pick_alternatives(logits: torch.Tensor, entry_requests: torch.Tensor, candidates: Sequence[Sequence[int]],
                      k: int) -> torch.Tensor:
    """``[n, k]`` token ids (``-1`` padded): per request the ``k`` of its ``candidates`` with the highest mean logit
    over its entries. ``logits`` ``[e, vocab]`` at answer positions, ``entry_requests`` ``[e]`` each entry's request
    in ``0..n-1`` (``n = len(candidates)``); ties keep the candidates' order."""
    n = len(candidates)
    out = torch.full((n, k), -1, dtype=torch.long)
    counts = torch.bincount(entry_requests.cpu(), minlength=n).clamp_min(1).to(logits.dtype)
    mean = torch.zeros((n, logits.shape[1]), dtype=logits.dtype, device=logits.device)
    mean = mean.index_add(0, entry_requests.to(logits.device), logits) / counts.to(logits.device)[:, None]
    for i, pool in enumerate(candidates):
        if not pool:
            continue
        ids = torch.tensor(list(pool), dtype=torch.long)
        scores = mean[i, ids.to(mean.device)].cpu()
        order = torch.sort(-scores, stable=True).indices[:k]
        out[i, : len(order)] = ids[order]
    return out


def alternative_pools(tok, requests: Sequence[ForgetRequest]) -> List[List[int]]:
    """Per request, the distinct first tokens of the other requests' answers (its own first token excluded), in
    request order; empty for a request with no such answer (it gets no rank term:
    :func:`requests_without_alternatives`). ``ValueError`` (naming the key) if a request has no answer."""
    missing = [r.index for r in requests if r.answer is None]
    if missing:
        raise ValueError(f"{RANK_KEY} needs each request's 'ground_truth' (the answer to rank below "
                         f"the others'); request(s) {missing} have none")
    firsts = [target_token_ids(tok, r.answer)[0] for r in requests]
    pools = []
    for i, own in enumerate(firsts):
        pool: List[int] = []
        for j, token in enumerate(firsts):
            if j != i and token != own and token not in pool:
                pool.append(token)
        pools.append(pool)
    return pools


def requests_without_alternatives(requests: Sequence[ForgetRequest], pools: Sequence[Sequence[int]]) -> List[int]:
    """The indices of the requests whose pool (:func:`alternative_pools`) is empty: no other request in the edit has
    an answer with another first token (one request alone, or all with one answer), so their rank term is 0."""
    return [r.index for r, pool in zip(requests, pools) if not pool]


def answer_first_tokens(tok, requests: Sequence[ForgetRequest]) -> List[int]:
    """The first token of each request's answer (as appended after the prompt: a leading space)."""
    return [target_token_ids(tok, r.answer)[0] for r in requests]
