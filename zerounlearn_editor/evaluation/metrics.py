"""Teacher-forced probe metrics on ``prompt + " " + answer`` (answer tokens: see :mod:`.batching`).

For an answer of ``T`` tokens ``a_1..a_T`` and the model's next-token distribution ``p(. | prefix_t)``:

* ``acc``       = (1/T) * #{t : argmax p(. | prefix_t) == a_t}   (EasyEdit's token accuracy)
* ``first_acc`` = 1 if argmax p(. | prompt) == a_1 else 0        (does the model start the answer?)
* ``prob``      = exp((1/T) * sum_t log p(a_t | prefix_t))       (geometric-mean token probability)
* ``seq_prob``  = exp(sum_t log p(a_t | prefix_t))               (probability of the whole answer)
* ``pred_ids``  = the argmax token ids at those T positions      (EasyEdit's locality "outputs")

Probes are batched by similar length; values do not depend on padding side or batch size (up to
float rounding). ``acc`` has a floor for multi-token answers (given " Hon", "da" is predicted whether
or not the model knows the fact); ``first_acc`` has none.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, TypedDict

import torch

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.batching import encode_probe, padded_batches, span_log_probs

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class ProbeScores(TypedDict):
    """Per-probe results of :func:`evaluate_probes`; every list has one entry per probe."""

    acc: List[float]
    first_acc: List[float]
    prob: List[float]
    seq_prob: List[float]
    pred_ids: List[List[int]]
    n_tokens: List[int]


def evaluate_probes(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    probes: Sequence[Probe],
    batch_size: int = 32,
    padding_side: Optional[str] = None,
) -> ProbeScores:
    """:class:`ProbeScores` of ``probes``, in order, ``batch_size`` per forward pass.

    ``model``: a causal LM returning logits ``[batch, seq, vocab]`` (put in eval mode; its output head runs only
    at the positions that predict an answer token where its forward takes ``logits_to_keep``:
    :func:`~zerounlearn_editor.evaluation.batching.span_log_probs`);
    ``padding_side``: ``"left"``/``"right"``, default the tokenizer's.
    """
    scores: ProbeScores = {"acc": [], "first_acc": [], "prob": [], "seq_prob": [], "pred_ids": [], "n_tokens": []}
    if not probes:
        return scores
    encoded = [encode_probe(tok, probe) for probe in probes]
    per_probe: List[Optional[tuple]] = [None] * len(encoded)
    batches = padded_batches(model, tok, [e.input_ids for e in encoded], batch_size, padding_side,
                             desc=f"scoring {len(encoded)} probes")
    for indices, batch in batches:
        device = batch.input_ids.device
        spans = []
        for row, index in enumerate(indices):
            item, offset = encoded[index], batch.offsets[row]
            cols = torch.arange(offset + item.answer_start, offset + len(item.input_ids), device=device)
            spans.append((row, cols, batch.input_ids[row, cols]))  # the answer's positions and tokens [n]
        for index, (_, _, targets), (log_probs, predicted) in zip(indices, spans, span_log_probs(model, batch, spans)):
            per_probe[index] = (log_probs.cpu(), predicted.cpu(), targets.cpu())
    for lp, pred, tgt in per_probe:  # type: ignore[misc]
        scores["acc"].append(float((pred == tgt).float().mean()))
        scores["first_acc"].append(float(pred[0] == tgt[0]))
        scores["prob"].append(float(lp.mean().exp()))
        scores["seq_prob"].append(float(lp.sum().exp()))
        scores["pred_ids"].append(pred.tolist())
        scores["n_tokens"].append(int(tgt.numel()))
    return scores


def answer_argmax_hits(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    probes: Sequence[Probe],
    batch_size: int = 32,
) -> List[bool]:
    """Per probe, whether every answer token is the argmax (``acc == 1.0`` of :func:`evaluate_probes`: what
    greedy decoding produces); memory as :func:`answer_argmax_ids`."""
    hits = []
    for probe, predicted in zip(probes, answer_argmax_ids(model, tok, probes, batch_size)):
        encoded = encode_probe(tok, probe)
        hits.append(predicted == list(encoded.input_ids[encoded.answer_start:]))
    return hits


def answer_argmax_ids(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    probes: Sequence[Probe],
    batch_size: int = 32,
) -> List[List[int]]:
    """Per probe, the argmax token ids ``[T]`` at the positions that predict its ``T`` answer tokens (teacher-forced;
    :func:`evaluate_probes`' ``pred_ids``), with the output head applied only at those positions.

    Memory: the head's input ``[batch, len, d_model]`` is captured and the forward stops there, so no
    ``[batch, len, vocab]`` logits are made; ``[answer tokens, vocab]`` per probe instead. A model whose
    output head cannot be found, or whose forward does not call it, falls back to :func:`evaluate_probes`.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_name = next((name for name, module in model.named_modules() if module is head), None)
    if head is None or not head_name:
        return evaluate_probes(model, tok, probes, batch_size)["pred_ids"]
    from zerounlearn_editor.evaluation.batching import padded_batches
    from zerounlearn_editor.support.model_access import StopForward, capture_inputs

    encoded = [encode_probe(tok, probe) for probe in probes]
    predicted_ids: List[List[int]] = [[] for _ in encoded]
    for indices, batch in padded_batches(model, tok, [e.input_ids for e in encoded], batch_size):
        with torch.no_grad(), capture_inputs(model, [head_name], stop_after=head_name) as captured:
            try:
                model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      position_ids=batch.position_ids, use_cache=False)
            except StopForward:
                pass
        if head_name not in captured:  # the forward computed its logits without calling the head module
            return evaluate_probes(model, tok, probes, batch_size)["pred_ids"]
        states = captured.pop(head_name)  # [batch, len, d_model]; the hook is gone before the head runs below
        with torch.no_grad():
            for row, index in enumerate(indices):
                item, offset = encoded[index], batch.offsets[row]
                cols = torch.arange(offset + item.answer_start, offset + len(item.input_ids), device=states.device)
                predicted_ids[index] = head(states[row, cols - 1]).float().argmax(dim=-1).tolist()  # [T]
        del states
    return predicted_ids
