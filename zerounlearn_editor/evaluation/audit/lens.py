"""Logit lens: where in the network the answer is still readable.

The residual stream ``h_l`` ``[d]`` at the last prompt position after each decoder layer
``l >= first_layer`` goes through the final norm and the output head; the probe's *best rank* is the
minimum over those layers of the answer's first token's rank among the ``vocab`` logits (0 = top).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.batching import encode_probe, padded_batches
from zerounlearn_editor.support.model_access import StopForward, capture_outputs, get_module, num_hidden_layers


def lens_logits(model: nn.Module, tok, prompts: Sequence[Sequence[int]], first_layer: int, layer_module_tmp: str,
                ln_f_module: str, batch_size: int = 16) -> Iterator[Tuple[List[int], torch.Tensor]]:
    """Per left-padded batch of token ``prompts``: the prompt indices and the lens logits ``[layers, b, vocab]``
    (float32) at the last position after each decoder layer ``first_layer..L-1``, through the final norm and head."""
    last = num_hidden_layers(model)
    if not 0 <= first_layer < last:
        raise ValueError(f"logit lens: first layer {first_layer} outside 0..{last - 1}")
    names = [layer_module_tmp.format(l) for l in range(first_layer, last)]
    norm = get_module(model, ln_f_module)
    head = model.get_output_embeddings()
    with torch.no_grad():
        for indices, batch in padded_batches(model, tok, prompts, batch_size, "left"):
            with capture_outputs(model, names, stop_after=names[-1]) as captured, contextlib.suppress(StopForward):
                model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      position_ids=batch.position_ids, use_cache=False)
            # left padding: the last position is the prompt's last token
            yield list(indices), torch.stack([head(norm(captured[name][:, -1])).float() for name in names])


def best_ranks(model: nn.Module, tok, probes: Sequence[Probe], first_layer: int, layer_module_tmp: str,
               ln_f_module: str, batch_size: int = 16) -> List[int]:
    """Per probe: the answer's first token's best rank over layers ``first_layer..L-1`` (see module docstring)."""
    if not probes:
        return []
    encoded = [encode_probe(tok, probe) for probe in probes]
    prompts = [e.input_ids[: e.answer_start] for e in encoded]
    result: List[int] = [0] * len(probes)
    for indices, logits in lens_logits(model, tok, prompts, first_layer, layer_module_tmp, ln_f_module, batch_size):
        answer = torch.tensor([encoded[i].answer_ids[0] for i in indices], device=logits.device)
        target = logits.gather(2, answer[None, :, None].expand(len(logits), -1, 1))  # [layers, b, 1]
        best = (logits > target).sum(dim=2).min(dim=0).values  # 0 = top; ties count for it
        for row, index in enumerate(indices):
            result[index] = int(best[row])
    return result


def option_ranks(logits: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
    """Rank of option 0 among ``options`` ``[k]`` (token ids) by ``logits`` ``[..., vocab]``: how many of the
    other options score at least as high (0 = option 0 wins outright; a tie counts against it), ``[...]``."""
    scores = logits[..., options]  # [..., k]
    return (scores[..., 1:] >= scores[..., :1]).sum(dim=-1)


def lens_option_ranks(model: nn.Module, tok, prompts: Sequence[str], options: Sequence[Sequence[str]],
                      layer_module_tmp: str, ln_f_module: str, batch_size: int = 16) -> torch.Tensor:
    """``[n, L]``: per prompt and decoder layer, the lens rank (:func:`option_ranks`) of the first token of
    ``options[i][0]`` (the true answer) among the first tokens of ``options[i]``."""
    firsts, bare = [], []
    for prompt, opts in zip(prompts, options):
        encoded = [encode_probe(tok, Probe(prompt, o)) for o in opts]
        firsts.append(torch.tensor([e.answer_ids[0] for e in encoded]))
        bare.append(encoded[0].input_ids[: encoded[0].answer_start])
    out = torch.zeros(len(prompts), num_hidden_layers(model), dtype=torch.long)
    for indices, logits in lens_logits(model, tok, bare, 0, layer_module_tmp, ln_f_module, batch_size):
        for row, index in enumerate(indices):
            out[index] = option_ranks(logits[:, row], firsts[index].to(logits.device)).cpu()
    return out
