"""Teacher-forced scoring (:mod:`zerounlearn_editor.evaluation.teacher_forcing`) on tiny random models: the summed and
per-token log-probabilities equal a reference from every position's logits, keep their gradient, and the output
head runs only at the positions whose next token is scored."""
from __future__ import annotations

import pytest
import torch

try:  # tests/ on sys.path (pytest's default for a directory without __init__.py)
    import helpers_tiny as tiny
except ImportError:  # tests/ made a package
    from tests import helpers_tiny as tiny

from zerounlearn_editor.evaluation.teacher_forcing import (
    encode_answers,
    encode_texts,
    sequence_log_probs,
    token_log_probs,
)

words = tiny.words
PAIRS = [(words(1, 2), words(3)), (words(5, 9, 11, 13, 17), words(29, 31)), (words(4), words(8, 15, 16))]
TEXTS = [words(1, 2, 3, 4, 5, 6), words(7, 8)]


@pytest.fixture(scope="module")
def tok():
    return tiny.tiny_tokenizer()


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request, tok):
    torch.set_num_threads(1)
    return tiny.random_causal_lm(request.param, tok)


def _reference(model, batch) -> torch.Tensor:
    """``[n, L - 1]``: every position's logits, the scored tokens' log-probabilities, 0 elsewhere."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].double()
    logp = torch.log_softmax(logits, dim=-1).gather(2, batch.input_ids[:, 1:, None]).squeeze(2)
    return torch.where(batch.target_mask, logp, torch.zeros_like(logp))


@pytest.mark.parametrize("encode, data", [(encode_answers, PAIRS), (encode_texts, TEXTS)])
def test_log_probs_equal_the_every_position_reference(model, tok, encode, data):
    batch = encode(tok, data)
    with torch.no_grad():
        reference = _reference(model, batch)
        per_token = token_log_probs(model, batch)
        summed = sequence_log_probs(model, batch)
    assert torch.allclose(per_token.double(), reference, atol=1e-5)
    assert torch.allclose(summed.double(), reference.sum(dim=1), atol=1e-4)


def test_the_head_runs_only_at_scored_positions_and_the_gradient_flows(model, tok):
    batch = encode_answers(tok, PAIRS)
    seen = []
    head = model.get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda _m, args: seen.append(tuple(args[0].shape)))
    try:
        loss = -sequence_log_probs(model, batch).sum()
    finally:
        handle.remove()
    scored_columns = int(batch.target_mask.any(dim=0).sum())
    assert seen == [(len(PAIRS), scored_columns, seen[0][2])]
    assert scored_columns < batch.input_ids.shape[1] - 1  # the prompts' positions are left out
    decoder_weight = next(w for name, w in model.named_parameters() if "mlp" in name and w.dim() == 2)
    model.zero_grad()
    loss.backward()
    grad = decoder_weight.grad.clone()
    model.zero_grad()
    reference = -_reference(model, batch).sum()  # every position's logits
    reference.backward()
    assert float(grad.abs().sum()) > 0
    assert torch.allclose(grad.double(), decoder_weight.grad.double(), atol=1e-5, rtol=1e-4)  # through the decoder
    model.zero_grad()
