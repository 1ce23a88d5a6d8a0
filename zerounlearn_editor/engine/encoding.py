"""Tokenising prompts into right-padded batches with a lookup position per row (the subject's last token, or
the prompt's last token; right padding keeps it where it is in an unpadded forward pass)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Literal, Optional, Sequence

import torch

from zerounlearn_editor.evaluation.batching import pad_sequences, pad_token_id


@dataclass
class EncodedBatch:
    """``input_ids``/``attention_mask`` ``[rows, seq]``, ``lookup`` positions and ``lengths`` ``[rows]``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    lookup: torch.Tensor
    lengths: torch.Tensor

    def to(self, device: torch.device) -> "EncodedBatch":
        return EncodedBatch(self.input_ids.to(device), self.attention_mask.to(device), self.lookup.to(device),
                            self.lengths.to(device))


def _ids(tok, text: str) -> List[int]:
    return list(tok(text)["input_ids"])


def encode_rows(
    tok,
    contexts: Sequence[str],
    prefixes: Sequence[str],
    subjects: Sequence[str],
    suffixes: Sequence[str],
    fact_token: Literal["subject_last", "last"] = "subject_last",
    appended: Optional[Sequence[Sequence[int]]] = None,
) -> EncodedBatch:
    """Encode rows ``context + prefix + subject + suffix`` (+ ``appended`` token ids); ``lookup`` is the index
    of the subject's last token (``subject_last``) or of the prompt's last token (``last``)."""
    rows: List[List[int]] = []
    lookups: List[int] = []
    for i, (context, prefix, subject, suffix) in enumerate(zip(contexts, prefixes, subjects, suffixes)):
        full = _ids(tok, context + prefix + subject + suffix)
        lookup = len(full) - 1
        if fact_token == "subject_last":
            lookup = min(len(_ids(tok, context + prefix + subject)) - 1, lookup)
        if appended is not None:
            full = full + list(appended[i])
        rows.append(full)
        lookups.append(lookup)
    padded = pad_sequences(rows, pad_token_id(tok), "right", torch.device("cpu"))
    mask = padded.attention_mask
    return EncodedBatch(padded.input_ids, mask, torch.tensor(lookups, dtype=torch.long), mask.sum(1))


def target_token_ids(tok, target: Optional[str]) -> List[int]:
    """Token ids of a neutral target appended after a prompt: ``[eos_token_id]`` for ``None`` or the EOS text,
    else the text with a leading space and no special tokens."""
    if target is None or (tok.eos_token is not None and target.strip() == tok.eos_token):
        if tok.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token: set 'neutral_target' in the hparams")
        return [int(tok.eos_token_id)]
    ids = list(tok(" " + target.lstrip(), add_special_tokens=False)["input_ids"])
    if not ids:
        raise ValueError(f"neutral target {target!r} tokenises to nothing")
    return ids
