"""The sampled context prefixes on the model's KV cache (issue 48): the same tokens as the full-forward sampler they
replaced, one token per forward after the starter, logits at the last position only, and full forwards on a model
that takes or returns no cache."""
from __future__ import annotations

from typing import List

import pytest
import torch
from torch import nn

from arch_zoo import ARCHS, tiny_config_model
from tiny_models import tiny_tokenizer
from zerounlearn_editor.engine.contexts import clear_context_prefixes, context_prefixes, sample_prefixes

_STARTERS = ("The", "Therefore", "Because", "I", "You", "In", "When", "It", "However", "This")


def reference_prefixes(model, tok, count: int, length: int, seed: int) -> List[str]:
    """:func:`context_prefixes` as it was before issue 48: a full forward of the whole sequence per token."""
    return sample_prefixes(model, tok, count, length, seed, cached=False)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_cached_sampler_draws_the_reference_tokens(tok, arch):
    model = tiny_config_model(arch, tok)
    for count, length, seed in ((3, 7, 0), (2, 12, 5)):
        expected = reference_prefixes(model, tok, count, length, seed)
        clear_context_prefixes(model)
        assert context_prefixes(model, tok, count, length, seed) == expected
        assert len(set(expected)) == count + 1  # distinct draws: the comparison is not between empty strings


class _Recorder:
    """Forward pre-hook on the model and forward hook on its output head: input lengths and logit positions."""

    def __init__(self, model: nn.Module) -> None:
        self.inputs: List[int] = []
        self.logit_rows: List[int] = []
        self.handles = [
            model.register_forward_pre_hook(self._pre, with_kwargs=True),
            model.get_output_embeddings().register_forward_hook(self._head),
        ]

    def _pre(self, _module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.inputs.append(int(ids.shape[1]))

    def _head(self, _module, _args, out) -> None:
        self.logit_rows.append(int(out.shape[1]))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_one_forward_of_the_starter_then_one_token_per_step_and_last_logits_only(tok, arch):
    model = tiny_config_model(arch, tok)
    recorder = _Recorder(model)
    try:
        context_prefixes(model, tok, 2, 6, 0)
    finally:
        recorder.remove()
    starters = [len(tok(s)["input_ids"]) for s in _STARTERS[:2]]
    assert recorder.inputs == [starters[0]] + [1] * 5 + [starters[1]] + [1] * 5
    assert recorder.logit_rows == [1] * 12


class _NoCache(nn.Module):
    """A causal LM whose forward takes ``input_ids`` only (no cache, no ``logits_to_keep``)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids):
        return self.inner(input_ids=input_ids, use_cache=False)


class _ReturnsNoCache(_NoCache):
    """A causal LM that takes a cache argument but returns no cache."""

    def forward(self, input_ids, cache=None, use_cache=None):  # noqa: ARG002 (the signature is the point)
        assert cache is None, "a cache was passed back although none was returned"
        out = self.inner(input_ids=input_ids, use_cache=False)
        out.cache = None
        return out


@pytest.mark.parametrize("wrapper", [_NoCache, _ReturnsNoCache])
@pytest.mark.parametrize("arch", ["llama", "gemma3", "gpt2"])
def test_model_without_a_cache_samples_the_same_prefixes_by_full_forwards(tok, arch, wrapper):
    inner = tiny_config_model(arch, tok)
    expected = reference_prefixes(inner, tok, 2, 6, 3)
    model = wrapper(inner)
    lengths: List[int] = []
    handle = inner.register_forward_pre_hook(lambda _m, _a, kw: lengths.append(int(kw["input_ids"].shape[1])),
                                             with_kwargs=True)
    try:
        assert context_prefixes(model, tok, 2, 6, 3) == expected
    finally:
        handle.remove()
    starter = len(tok("The")["input_ids"])
    assert lengths[:6] == list(range(starter, starter + 6))  # the whole sequence each time


def _real_model(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), tok


@pytest.mark.slow
def test_smollm2_shipped_yamls_prefixes_unchanged(smollm2_path):
    """Every shipped SmolLM2 YAML samples 2 x 5 (paper, -many, -retain...) or 8 x 10 (-deep) with seed 0."""
    model, tok = _real_model(smollm2_path)
    for count, length in ((2, 5), (8, 10)):
        assert context_prefixes(model, tok, count, length, 0) == reference_prefixes(model, tok, count, length, 0)


@pytest.mark.slow
def test_gemma3_prefixes_unchanged(gemma3_path):
    """Gemma-3 (262,144-token vocabulary, sliding-window layers) on its cache: the reference's draws (2 x 6 keeps
    the full-forward reference short)."""
    model, tok = _real_model(gemma3_path)
    assert context_prefixes(model, tok, 2, 6, 0) == reference_prefixes(model, tok, 2, 6, 0)
