"""Batched greedy generation with left padding (the tokenizer itself is not modified)."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Sequence

import torch
from transformers import GenerationConfig

from zerounlearn_editor.evaluation.batching import pad_token_id, padded_batches

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def generate_greedy(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    prompts: Sequence[str],
    max_new_tokens: int,
    batch_size: int = 16,
) -> List[str]:
    """Greedy continuations of ``prompts``, in order (the new text, special tokens removed), at most
    ``max_new_tokens`` tokens or until EOS, left-padded batches of similar length (model put in eval mode)."""
    if not prompts:
        return []
    pad_id = pad_token_id(tok)
    encoded = [tok(p)["input_ids"] for p in prompts]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        pad_token_id=pad_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    outputs: List[str] = [""] * len(prompts)
    with torch.no_grad():
        for indices, batch in padded_batches(model, tok, encoded, batch_size, "left"):
            generated = model.generate(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                generation_config=config,
            )  # [B, L + new]
            new_tokens = generated[:, batch.input_ids.shape[1] :]
            for index, row in zip(indices, new_tokens):
                outputs[index] = tok.decode(row.tolist(), skip_special_tokens=True)
    return outputs
