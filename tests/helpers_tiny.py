"""Tiny tokenizer and tiny causal LMs with known behaviour, for fast metric tests.

* :func:`tiny_tokenizer`: word-level tokenizer over ``w0 .. w{N_WORDS-1}`` (ids ``0..N_WORDS-1``)
  plus ``<pad> <unk> <bos> <eos>``; optionally prepends ``<bos>`` like Llama tokenizers.
* :func:`successor_llama`: a 2-layer ``LlamaForCausalLM`` whose argmax next token after word
  ``w{i}`` is ``w{(i+1) % N_WORDS}``, whatever the context: the layers' output projections
  are zero, so the final hidden state is the normalized input embedding, and ``lm_head`` row
  ``j`` is a multiple of the embedding of word ``j-1``. :func:`successor_logits` gives its
  exact logits for hand-checking probabilities.
* :func:`random_causal_lm`: randomly initialised tiny Llama / GPT-2 / Qwen3 (attention and
  positions matter), for padding- and batch-invariance checks.

Import in tests with ``from helpers_tiny import ...`` (``tests/`` has no ``__init__.py``, so
pytest's default ``prepend`` import mode puts ``tests/`` on ``sys.path``); the test modules
also fall back to ``from tests.helpers_tiny import ...`` should ``tests`` become a package.
"""
from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

__all__ = [
    "N_WORDS",
    "SPECIALS",
    "words",
    "tiny_tokenizer",
    "successor_llama",
    "successor_logits",
    "random_causal_lm",
]

N_WORDS = 60
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
_HIDDEN = 16
_SCALE = 4.0


def words(*ids: int) -> str:
    """The text ``"w{i} w{j} ..."`` for word ids."""
    return " ".join(f"w{i}" for i in ids)


def tiny_tokenizer(padding_side: str = "right", bos: bool = True) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: ``w{i}`` -> id ``i``; specials after the words (vocab 64)."""
    vocab = {f"w{i}": i for i in range(N_WORDS)}
    for special in SPECIALS:
        vocab[special] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins word tokens with spaces
    if bos:
        backend.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", vocab["<bos>"])]
        )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    tok.padding_side = padding_side
    return tok


def _llama_config(vocab_size: int, tok: PreTrainedTokenizerFast, layers: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=_HIDDEN,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )


def successor_llama(tok: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    """Tiny Llama predicting ``w{(i+1) % N_WORDS}`` after ``w{i}`` (see module docstring)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_llama_config(len(tok), tok, layers=2)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = torch.randn(len(tok), _HIDDEN)
        emb = emb / emb.norm(dim=-1, keepdim=True)  # distinct unit vectors
        model.model.embed_tokens.weight.copy_(emb)
        head = torch.zeros(len(tok), _HIDDEN)
        for j in range(N_WORDS):
            head[j] = _SCALE * emb[(j - 1) % N_WORDS]
        model.lm_head.weight.copy_(head)
    return model


def successor_logits(model: LlamaForCausalLM, token_id: int) -> torch.Tensor:
    """Exact logits ``[vocab]`` of :func:`successor_llama` after ``token_id`` (any context).

    Hidden state = RMSNorm(unit embedding) = ``sqrt(hidden) * e`` (up to the norm's eps).
    """
    with torch.no_grad():
        emb = model.model.embed_tokens.weight[token_id].double()
        eps = model.config.rms_norm_eps
        hidden = emb / torch.sqrt(emb.pow(2).mean() + eps)
        return model.lm_head.weight.double() @ hidden


def random_causal_lm(
    arch: str, tok: PreTrainedTokenizerFast, seed: int = 0, layers: int = 2, init_std: float = 0.2
) -> PreTrainedModel:
    """Randomly initialised tiny ``"llama"``, ``"gpt2"`` or ``"qwen3"`` causal LM (eval mode).

    ``init_std`` (larger than HF's 0.02) makes predictions depend visibly on the context.
    """
    torch.manual_seed(seed)
    ids = dict(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        initializer_range=init_std,
    )
    if arch == "llama":
        config = _llama_config(len(tok), tok, layers)
        config.initializer_range = init_std
        model: PreTrainedModel = LlamaForCausalLM(config)
    elif arch == "gpt2":
        config = GPT2Config(
            vocab_size=len(tok), n_embd=_HIDDEN, n_inner=32, n_layer=layers, n_head=2, n_positions=256,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **ids,
        )
        model = GPT2LMHeadModel(config)
    elif arch == "qwen3":
        config = Qwen3Config(
            vocab_size=len(tok), hidden_size=_HIDDEN, intermediate_size=32, num_hidden_layers=layers,
            num_attention_heads=2, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
            tie_word_embeddings=False, **ids,
        )
        model = Qwen3ForCausalLM(config)
    else:
        raise ValueError(f"unknown arch {arch!r}")
    return model.eval()
