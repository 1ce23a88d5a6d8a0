"""Tokenizing probes and padding token sequences into batches, without touching the tokenizer.

A probe's answer tokens are the tokens of ``prompt + " " + answer`` after those of ``prompt`` alone (both
with special tokens; from the first difference if a token merges across the boundary), exactly what the
model reads, whatever the tokenizer does with the space. Padding is done here, on the tokenizer's side
(or the one asked for), with position ids from the attention mask, so left and right padding agree.
"""
from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence, Tuple

import torch

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.support.model_access import model_device
from zerounlearn_editor.support.progress import progress_bar

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EncodedProbe:
    """Token ids of ``prompt + " " + answer``; ``input_ids[answer_start:]`` are the answer."""

    input_ids: List[int]
    answer_start: int

    @property
    def answer_ids(self) -> List[int]:
        """The answer's token ids."""
        return self.input_ids[self.answer_start :]


@dataclass(frozen=True)
class PaddedBatch:
    """Tensors ``[batch, max_len]``; ``offsets[i]``: where row ``i``'s first real token sits."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    offsets: List[int]


def encode_probe(tok: "PreTrainedTokenizerBase", probe: Probe) -> EncodedProbe:
    """Tokenize one probe (see the module docstring); ``ValueError`` when the answer adds no token or
    no token precedes it (an empty prompt and no BOS), so its first token cannot be scored."""
    full = tok(probe.prompt + " " + probe.answer)["input_ids"]
    prompt = tok(probe.prompt)["input_ids"]
    start = 0
    limit = min(len(prompt), len(full))
    while start < limit and prompt[start] == full[start]:
        start += 1
    if start < len(prompt):
        logger.debug("prompt tokens are not a prefix of prompt+answer tokens for %r", probe)
    if start >= len(full):
        raise ValueError(f"answer adds no token: {probe!r}")
    if start == 0:
        raise ValueError(f"no token precedes the answer: {probe!r}")
    return EncodedProbe(input_ids=list(full), answer_start=start)


def pad_token_id(tok: "PreTrainedTokenizerBase") -> int:
    """Id used for padding: the pad token, else EOS, else 0 (padded positions are masked)."""
    for candidate in (getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None)):
        if isinstance(candidate, int):
            return candidate
    return 0


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int, side: str,
                  device: torch.device) -> PaddedBatch:
    """Pad token id lists into one ``[batch, max_len]`` batch on ``side``; positions ``cumsum(mask) - 1``."""
    if not sequences:
        raise ValueError("cannot pad an empty list of sequences")
    max_len = max(len(seq) for seq in sequences)
    ids = torch.full((len(sequences), max_len), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), max_len), dtype=torch.long)
    offsets: List[int] = []
    for row, seq in enumerate(sequences):
        offset = max_len - len(seq) if side == "left" else 0
        ids[row, offset : offset + len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, offset : offset + len(seq)] = 1
        offsets.append(offset)
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    return PaddedBatch(ids.to(device), mask.to(device), positions.to(device), offsets)


def padded_batches(model: torch.nn.Module, tok: "PreTrainedTokenizerBase", sequences: Sequence[Sequence[int]],
                   batch_size: int, padding_side: Optional[str] = None,
                   desc: Optional[str] = None) -> Iterator[Tuple[List[int], PaddedBatch]]:
    """Put ``model`` in eval mode and yield ``(indices, batch)``: ``sequences`` in batches of similar length
    (longest first, to limit padding), padded on ``padding_side`` (default the tokenizer's, else right) on the
    model's device; a progress bar named ``desc`` (none without)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    side = padding_side or getattr(tok, "padding_side", None) or "right"
    if side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {side!r}")
    model.eval()
    device = model_device(model)
    pad_id = pad_token_id(tok)
    order = sorted(range(len(sequences)), key=lambda i: (-len(sequences[i]), i))
    groups = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    for indices in progress_bar(groups, desc=desc, unit="batch", disable=desc is None):
        yield indices, pad_sequences([sequences[i] for i in indices], pad_id, side, device)


def logit_batches(model: torch.nn.Module, tok: "PreTrainedTokenizerBase", sequences: Sequence[Sequence[int]],
                  batch_size: int, padding_side: Optional[str] = None,
                  desc: Optional[str] = None) -> Iterator[Tuple[List[int], PaddedBatch, torch.Tensor]]:
    """:func:`padded_batches` with the causal LM's logits ``[batch, max_len, vocab]`` (no grad)."""
    for indices, batch in padded_batches(model, tok, sequences, batch_size, padding_side, desc):
        with torch.no_grad():
            output = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           position_ids=batch.position_ids, use_cache=False)
        yield indices, batch, output if isinstance(output, torch.Tensor) else output.logits


def _takes_position_tensor(model: torch.nn.Module) -> bool:
    """Whether ``model.forward`` takes ``logits_to_keep`` as a tensor of positions: transformers' own models
    (>= 4.50) annotate it ``int | torch.Tensor``; a forward that names it without ``Tensor`` in its annotation (an
    int only: "keep the last n") does not."""
    param = inspect.signature(model.forward).parameters.get("logits_to_keep")
    return param is not None and "Tensor" in str(param.annotation)


def kept_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                positions: torch.Tensor, position_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The causal LM's logits ``[batch, k, vocab]`` at the ``k`` sequence ``positions`` (sorted, ``[k]`` long) of
    every row of ``input_ids`` ``[batch, len]``, under the caller's grad mode. A forward that takes
    ``logits_to_keep`` as a tensor of positions (transformers >= 4.50) applies its output head at those positions
    only (on Gemma-3 the head over its 262k-token vocabulary costs more than the decoder); any other forward gives
    every position's logits and they are sliced: the same values. ``positions`` go to the model on the CPU (they
    index the last hidden state wherever a device map puts it)."""
    positions = positions.cpu()
    kwargs = {} if position_ids is None else {"position_ids": position_ids}
    keep = _takes_position_tensor(model)
    if keep:
        kwargs["logits_to_keep"] = positions
    output = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)
    logits = output if isinstance(output, torch.Tensor) else output.logits
    if not keep or logits.shape[1] != positions.numel():  # every position's logits
        logits = logits[:, positions.to(logits.device)]
    return logits


def logits_at(model: torch.nn.Module, batch: PaddedBatch, positions: torch.Tensor) -> torch.Tensor:
    """:func:`kept_logits` ``[batch, k, vocab]`` of a :class:`PaddedBatch` (its position ids), without grad."""
    with torch.no_grad():
        return kept_logits(model, batch.input_ids, batch.attention_mask, positions, batch.position_ids)


def answer_log_probs(logits: torch.Tensor, row: int, cols: torch.Tensor,
                     targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(log p(targets[i] | tokens before cols[i]) [n], argmax ids [n])`` from row ``row`` of ``logits``
    ``[batch, len, vocab]``: position ``c - 1`` predicts the token at ``c``."""
    step_logits = logits[row, cols - 1].float()  # [n, vocab]
    log_probs = torch.log_softmax(step_logits, dim=-1).gather(1, targets[:, None]).squeeze(1)
    return log_probs, step_logits.argmax(dim=-1)


def span_log_probs(model: torch.nn.Module, batch: PaddedBatch,
                   spans: Sequence[Tuple[int, torch.Tensor, torch.Tensor]]) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """:func:`answer_log_probs` of each ``(row, cols [n], targets [n])`` span of ``batch``, from one forward whose
    output head runs only at the positions that predict a span's token (:func:`logits_at`; ``cols - 1``, the union
    over the spans)."""
    if not spans:
        return []
    device = batch.input_ids.device
    kept = torch.unique(torch.cat([cols for _, cols, _ in spans]) - 1)  # [k] sorted
    logits = logits_at(model, batch, kept)  # [B, k, V]
    column = torch.full((batch.input_ids.shape[1] + 1,), -1, dtype=torch.long, device=device)
    column[kept + 1] = torch.arange(kept.numel(), device=device) + 1  # token position c -> c's column in logits, + 1
    return [answer_log_probs(logits, row, column[cols], targets) for row, cols, targets in spans]
