"""Logit lens: where in the network the answer is still readable.

The residual stream ``h_l`` ``[d]`` at the last prompt position after each decoder layer
``l >= first_layer`` goes through the final norm and the output head; the probe's *best rank* is the
minimum over those layers of the answer's first token's rank among the ``vocab`` logits (0 = top).
"""
from __future__ import annotations

import contextlib
from typing import List, Sequence

import torch
from torch import nn

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.batching import encode_probe, padded_batches
from zerounlearn_editor.support.model_access import StopForward, capture_outputs, get_module, num_hidden_layers


def best_ranks(model: nn.Module, tok, probes: Sequence[Probe], first_layer: int, layer_module_tmp: str,
               ln_f_module: str, batch_size: int = 16) -> List[int]:
    """Per probe: the answer's first token's best rank over layers ``first_layer..L-1`` (see module docstring)."""
    if not probes:
        return []
    last = num_hidden_layers(model)
    if not 0 <= first_layer < last:
        raise ValueError(f"logit lens: first layer {first_layer} outside 0..{last - 1}")
    names = [layer_module_tmp.format(l) for l in range(first_layer, last)]
    norm = get_module(model, ln_f_module)
    head = model.get_output_embeddings()
    encoded = [encode_probe(tok, probe) for probe in probes]
    prompts = [e.input_ids[: e.answer_start] for e in encoded]
    result: List[int] = [0] * len(probes)
    with torch.no_grad():
        for indices, batch in padded_batches(model, tok, prompts, batch_size, "left"):
            with capture_outputs(model, names, stop_after=names[-1]) as captured, contextlib.suppress(StopForward):
                model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      position_ids=batch.position_ids, use_cache=False)
            answer = torch.tensor([encoded[i].answer_ids[0] for i in indices], device=batch.input_ids.device)
            best = None
            for name in names:
                hidden = captured[name][:, -1]  # [b, d], left padding: the last position is the prompt's last token
                logits = head(norm(hidden)).float()  # [b, vocab]
                ranks = (logits > logits.gather(1, answer[:, None])).sum(dim=1)  # 0 = top; ties count for it
                best = ranks if best is None else torch.minimum(best, ranks)
            for row, index in enumerate(indices):
                result[index] = int(best[row])
    return result
