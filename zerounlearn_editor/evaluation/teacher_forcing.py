"""Teacher-forced scoring of texts: right-padded batches whose chosen tokens are scored, their summed
log-probabilities and the token-mean NLL.

Shared by the fine-tuning baselines (:mod:`zerounlearn_editor.methods.baselines.training`) and the
audit's relearning attack (:mod:`zerounlearn_editor.evaluation.audit.relearn`). Answer tokens are found
as the metrics find them (:func:`zerounlearn_editor.evaluation.batching.encode_probe`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.batching import encode_probe, kept_logits, pad_sequences, pad_token_id

__all__ = ["AnswerBatch", "pad_rows", "answer_rows", "text_rows", "encode_answers", "encode_texts",
           "sequence_log_probs", "token_log_probs", "nll_loss"]


@dataclass
class AnswerBatch:
    """A right-padded teacher-forcing batch: ``input_ids``/``attention_mask`` ``[n, L]``; ``target_mask``
    ``[n, L - 1]`` is True at ``t`` when token ``t + 1`` (predicted from the logits at ``t``) is scored."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    target_mask: torch.Tensor

    @property
    def n_tokens(self) -> torch.Tensor:
        """Scored tokens per row ``[n]`` (long)."""
        return self.target_mask.sum(dim=1)

    def to(self, device: torch.device) -> "AnswerBatch":
        return AnswerBatch(self.input_ids.to(device), self.attention_mask.to(device), self.target_mask.to(device))


def pad_rows(tok, rows: Sequence[Sequence[int]], starts: Sequence[int]) -> AnswerBatch:
    """Right-pad ``rows``; tokens ``row[start:]`` of each row are the scored ones."""
    padded = pad_sequences(rows, pad_token_id(tok), "right", torch.device("cpu"))
    target = torch.zeros((len(rows), max(padded.input_ids.shape[1] - 1, 0)), dtype=torch.bool)
    for i, (row, start) in enumerate(zip(rows, starts)):
        target[i, start - 1 : len(row) - 1] = True
    return AnswerBatch(padded.input_ids, padded.attention_mask, target)


def answer_rows(tok, pairs: Sequence[Tuple[str, str]]) -> Tuple[List[List[int]], List[int]]:
    """Token rows of ``prompt + " " + answer`` and the index of each row's first answer token."""
    encoded = [encode_probe(tok, Probe(prompt, answer)) for prompt, answer in pairs]
    return [list(e.input_ids) for e in encoded], [e.answer_start for e in encoded]


def text_rows(tok, texts: Sequence[str]) -> Tuple[List[List[int]], List[int]]:
    """Token rows of plain texts, every token after the first scored."""
    rows = []
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"retain text {index}: expected a string, got {type(text).__name__}")
        ids = list(tok(text)["input_ids"])
        if len(ids) < 2:
            raise ValueError(f"retain text {index} ({text!r}) has fewer than 2 tokens: nothing to score")
        rows.append(ids)
    return rows, [1] * len(rows)


def encode_answers(tok, pairs: Sequence[Tuple[str, str]]) -> AnswerBatch:
    """Batch of ``prompt + " " + answer`` texts scoring the answer tokens (answers without leading space)."""
    if not pairs:
        raise ValueError("no (prompt, answer) pairs to encode")
    return pad_rows(tok, *answer_rows(tok, pairs))


def encode_texts(tok, texts: Sequence[str]) -> AnswerBatch:
    """Batch of plain texts scoring every token after the first (language-modelling NLL)."""
    if not texts:
        raise ValueError("no texts to encode")
    return pad_rows(tok, *text_rows(tok, texts))


def _scored(model: nn.Module, batch: AnswerBatch) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits [n, k, V], mask [n, k], next tokens [n, k])`` at the ``k`` positions where some row scores its next
    token (the output head runs only there: :func:`~zerounlearn_editor.evaluation.batching.kept_logits`)."""
    columns = batch.target_mask.any(dim=0).nonzero()[:, 0]  # [k] positions t whose token t + 1 is scored somewhere
    logits = kept_logits(model, batch.input_ids, batch.attention_mask, columns)  # [n, k, V]
    mask = batch.target_mask.to(logits.device)[:, columns.to(logits.device)]
    targets = batch.input_ids[:, 1:].to(logits.device)[:, columns.to(logits.device)]
    return logits, mask, targets


def sequence_log_probs(model: nn.Module, batch: AnswerBatch) -> torch.Tensor:
    """Summed log-probability of the scored tokens of each row, ``[n]`` float32.

    One forward pass; the output head and the log-softmax (in float32) only at the scored positions.
    """
    logits, mask, targets = _scored(model, batch)
    scored = logits[mask].float()  # [N, V]
    token_logp = torch.log_softmax(scored, dim=-1).gather(1, targets[mask][:, None]).squeeze(1)  # [N]
    rows = mask.nonzero()[:, 0]
    return torch.zeros(mask.shape[0], dtype=token_logp.dtype, device=token_logp.device).index_add(0, rows, token_logp)


def token_log_probs(model: nn.Module, batch: AnswerBatch) -> torch.Tensor:
    """``[n, L - 1]`` float32: at each scored position (``batch.target_mask``) the log-probability of the scored
    token, 0 elsewhere (one forward pass; the output head only at the scored positions)."""
    logits, mask, targets = _scored(model, batch)
    full_mask = batch.target_mask.to(logits.device)
    out = torch.zeros(full_mask.shape, dtype=torch.float32, device=logits.device)
    scored = torch.log_softmax(logits[mask].float(), dim=-1)  # [N, V]
    out[full_mask] = scored.gather(1, targets[mask][:, None]).squeeze(1)
    return out


def nll_loss(logp: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """Token-mean negative log-likelihood from summed log-probs ``logp`` ``[n]`` and counts ``[n]``."""
    return -logp.sum() / n_tokens.sum().clamp(min=1)
