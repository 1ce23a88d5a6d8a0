"""Relearning attack: a few fine-tuning steps on a deep copy, then the forgotten prompts again.

``steps`` full-batch Adam steps on related facts (same relations, answers not forgotten;
:func:`.items.relearn_facts`; loss: the token-mean NLL of their answers) or on generic text (the
control: as many passages of the statistics corpus, naming no forgotten subject or answer; loss: the
NLL of every token), training the MLP weights only (``scope="mlp"``: names containing ``.mlp.``) or
every parameter (``scope="full"``). What comes back after the related facts but not after generic
text is the association, not noise. The ``rtt`` probe fine-tunes the same way on half of the forgotten facts
themselves (their prompts and true answers; :func:`.items.rtt_split`) and reads the other half. The caller's
model is never changed.
"""
from __future__ import annotations

import copy
from typing import List, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.evaluation.batching import model_device
from zerounlearn_editor.evaluation.teacher_forcing import (
    encode_answers,
    encode_texts,
    nll_loss,
    sequence_log_probs,
)

SCOPES = ("mlp", "full")


def generic_texts(passages: Sequence[str], n: int, words: int, forbidden_words: Sequence[str]) -> List[str]:
    """The first ``n`` passages naming no forbidden word (case-insensitive), cut to ``words`` words."""
    texts = []
    for passage in passages:
        text = " ".join(passage.split()[:words])
        if len(text.split()) < 2 or any(w in text.lower() for w in forbidden_words):
            continue
        texts.append(text)
        if len(texts) == n:
            break
    return texts


def relearned_copy(model: nn.Module, tok, scope: str, steps: int, lr: float,
                   pairs: Sequence[Tuple[str, str]] = (), texts: Sequence[str] = ()) -> nn.Module:
    """A deep copy of ``model`` after ``steps`` Adam steps on ``pairs`` (answer NLL) or ``texts`` (LM NLL),
    exactly one of them given; in eval mode (no dropout), so the run is deterministic."""
    if bool(pairs) == bool(texts):
        raise ValueError("relearning needs either (prompt, answer) pairs or texts, not both or neither")
    if scope not in SCOPES:
        raise ValueError(f"relearning scope must be one of {SCOPES}, got {scope!r}")
    twin = copy.deepcopy(model).eval()
    params = [p for n, p in twin.named_parameters() if scope == "full" or ".mlp." in n]
    if not params:
        raise ValueError(f"relearning scope {scope!r}: the model has no such parameters")
    for param in twin.parameters():
        param.requires_grad_(any(param is p for p in params))
    batch = (encode_answers(tok, pairs) if pairs else encode_texts(tok, texts)).to(model_device(twin))
    optimizer = torch.optim.Adam(params, lr=lr)
    with torch.enable_grad():
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            loss = nll_loss(sequence_log_probs(twin, batch), batch.n_tokens)
            loss.backward()
            optimizer.step()
    for param in twin.parameters():
        param.requires_grad_(False)
    return twin
