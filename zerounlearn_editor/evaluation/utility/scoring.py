"""Batched choice scoring: the log-probability of each answer word after a prompt.

Answer tokens are found as for every other metric (:func:`.batching.encode_probe`). When every
choice of an item is one token after the same prompt tokens (``" positive"``, ``" A"``), one forward
pass of the prompt scores all choices; otherwise each (item, choice) sequence is scored on its own
and its answer tokens' log-probabilities are summed.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.batching import encode_probe, padded_batches, span_log_probs
from zerounlearn_editor.evaluation.utility.tasks import UtilityItem

LOG = logging.getLogger(__name__)
_Wanted = List[Tuple[int, int, int, List[int]]]  # per sequence: (item, choice, answer start, answer ids)


def _plan(tok: Any, items: Sequence[UtilityItem]) -> Tuple[List[List[int]], List[_Wanted]]:
    """Sequences to run and, per sequence, the choices it scores."""
    sequences: List[List[int]] = []
    wanted: List[_Wanted] = []
    for item_index, item in enumerate(items):
        encoded = [encode_probe(tok, Probe(item.prompt, word)) for word in item.choices]
        prefix = encoded[0].input_ids[: encoded[0].answer_start]
        if all(len(e.answer_ids) == 1 and e.input_ids[: e.answer_start] == prefix for e in encoded):
            sequences.append(prefix)
            wanted.append([(item_index, c, len(prefix), e.answer_ids) for c, e in enumerate(encoded)])
        else:
            for choice, e in enumerate(encoded):
                sequences.append(list(e.input_ids))
                wanted.append([(item_index, choice, e.answer_start, e.answer_ids)])
    return sequences, wanted


def choice_logprobs(
    model: nn.Module, tok: Any, items: Sequence[UtilityItem], batch_size: int = 8, progress: bool = False
) -> List[List[float]]:
    """Per item, the summed log-probability of each choice's answer tokens (``[n_items][n_choices]``)."""
    if not items:
        return []
    sequences, wanted = _plan(tok, items)
    out: List[List[float]] = [[0.0] * len(item.choices) for item in items]
    for indices, batch in padded_batches(model, tok, sequences, batch_size, desc="utility" if progress else None):
        device = batch.input_ids.device
        choices, spans = [], []
        for row, index in enumerate(indices):
            offset = batch.offsets[row]
            for item, choice, start, ids in wanted[index]:
                choices.append((item, choice))
                spans.append((row, torch.arange(offset + start, offset + start + len(ids), device=device),
                              torch.tensor(ids, device=device)))
        for (item, choice), (log_probs, _) in zip(choices, span_log_probs(model, batch, spans)):
            out[item][choice] = float(log_probs.sum())
    return out


def task_scores(items: Sequence[UtilityItem], logprobs: Sequence[Sequence[float]]) -> Dict[str, Any]:
    """Accuracy of the argmax choice, with how often each choice was predicted and was gold."""
    k = len(items[0].choices) if items else 0
    preds = [max(range(len(lp)), key=lambda j: (lp[j], -j)) for lp in logprobs]
    correct = [int(p == item.gold) for p, item in zip(preds, items)]
    n = len(items)
    return {
        "accuracy": sum(correct) / n if n else float("nan"),
        "n": n,
        "chance": 1.0 / k if k else float("nan"),
        "pred_fraction": {items[0].choices[j]: sum(p == j for p in preds) / n for j in range(k)} if n else {},
        "gold_fraction": {items[0].choices[j]: sum(i.gold == j for i in items) / n for j in range(k)} if n else {},
        "correct": correct,
    }


def score_tasks(model: nn.Module, tok: Any, task_items: Mapping[str, Sequence[UtilityItem]], batch_size: int = 8,
                progress: bool = False) -> Dict[str, Dict[str, Any]]:
    """:func:`task_scores` of every task for the model's current state."""
    out = {}
    for name, items in task_items.items():
        start = time.perf_counter()
        out[name] = task_scores(items, choice_logprobs(model, tok, items, batch_size, progress))
        LOG.info("%s: accuracy %.3f (n=%d, chance %.2f) in %.1fs", name, out[name]["accuracy"], out[name]["n"],
                 out[name]["chance"], time.perf_counter() - start)
    return out
