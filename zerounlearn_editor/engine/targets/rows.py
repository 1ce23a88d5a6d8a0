"""A chunk's encoded target rows (:func:`encode_target_rows`) and the answer-suppression loss."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import torch

from zerounlearn_editor.engine.encoding import encode_rows
from zerounlearn_editor.engine.requests import ForgetRequest


def answer_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log p(token)`` ``[m]`` from ``logits`` ``[m, vocab]`` as ``-softplus(logsumexp_{j != y} z_j - z_y)``,
    which keeps ``1 - p`` and its gradient where ``log_softmax`` rounds to 0 (margins beyond ~17 nats in
    float32)."""
    z_y = logits.gather(1, tokens[:, None]).squeeze(1)
    others = logits.scatter(1, tokens[:, None], float("-inf")).logsumexp(-1)
    return -torch.nn.functional.softplus(others - z_y)


def answer_ranks(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Rank ``[m]`` of each ``tokens[e]`` in ``logits[e]`` (``[m, vocab]``): how many tokens score strictly
    higher, so 0 is the argmax (a tie with the answer does not push it down)."""
    z_y = logits.gather(1, tokens[:, None])
    return (logits > z_y).sum(-1)


def suppression_loss(seq_logp: torch.Tensor) -> torch.Tensor:
    """``-log(1 - p)`` ``[k]`` of sequences with log-probability ``seq_logp`` ``[k]`` (each ``< 0``): the
    ``suppress_answer`` loss, so ``loss < v_early_stop_loss`` means ``p < 1 - exp(-v_early_stop_loss)``."""
    return -torch.log(-torch.expm1(seq_logp.clamp(max=-1e-30)))


def suppression_per_request(logits: torch.Tensor, tokens: torch.Tensor, entry_rows: torch.Tensor,
                            row_requests: torch.Tensor, n: int) -> torch.Tensor:
    """Per-request suppression loss ``[n]``: the mean over a request's rewriting rows of ``-log(1 -
    p(answer))``, ``p(answer)`` the whole answer's probability. ``logits`` ``[m, vocab]`` and ``tokens``
    ``[m]``: one entry per answer token, in rewriting row ``entry_rows[e]``; ``row_requests`` ``[rows]``: each
    row's request."""
    rows = len(row_requests)
    token_logp = answer_logprobs(logits, tokens)
    seq_logp = torch.zeros(rows, device=logits.device, dtype=logits.dtype).index_add(0, entry_rows, token_logp)
    per_row = suppression_loss(seq_logp)
    counts = torch.bincount(row_requests, minlength=n).clamp_min(1).to(per_row.dtype)
    return torch.zeros(n, device=logits.device, dtype=per_row.dtype).index_add(0, row_requests, per_row) / counts


@dataclass
class TargetRows:
    """A chunk's rows: ``n * n_ctx`` request-major rewriting rows (prefix + prompt + the target tokens but the
    last), then one KL row per request (``subject + " is a"``); ``rw_req`` each rewriting row's request. The
    ``t_*`` lists: per target-token prediction its row, position, token id, weight ``1 / (m * n_ctx)``,
    request.
    """

    batch: object
    rw_req: List[int]
    t_rows: List[int]
    t_pos: List[int]
    t_tok: List[int]
    t_weight: List[float]
    t_req: List[int]


def encode_target_rows(tok, requests: Sequence[ForgetRequest], target_ids, prefixes: Sequence[str],
                       fact_token: str, device) -> TargetRows:
    """Encode a chunk's rewriting and KL rows (on ``device``) and list its target-token loss entries."""
    n, n_ctx = len(requests), len(prefixes)
    rw_req = [i for i in range(n) for _ in range(n_ctx)]
    contexts = [p for _ in range(n) for p in prefixes] + [""] * n
    prefixes_rows = [requests[i].prefix for i in rw_req] + [""] * n
    subjects = [requests[i].subject for i in rw_req] + [r.subject for r in requests]
    suffixes = [requests[i].suffix for i in rw_req] + [" is a"] * n
    appended = [list(target_ids[i][:-1]) for i in rw_req] + [[] for _ in range(n)]
    batch = encode_rows(tok, contexts, prefixes_rows, subjects, suffixes, fact_token, appended).to(device)
    t_rows, t_pos, t_tok, t_weight, t_req = [], [], [], [], []
    for row, i in enumerate(rw_req):
        m = len(target_ids[i])
        prompt_len = int(batch.lengths[row]) - (m - 1)
        for j, token in enumerate(target_ids[i]):
            t_rows.append(row)
            t_pos.append(prompt_len - 1 + j)
            t_tok.append(token)
            t_weight.append(1.0 / (m * n_ctx))
            t_req.append(i)
    return TargetRows(batch, rw_req, t_rows, t_pos, t_tok, t_weight, t_req)
