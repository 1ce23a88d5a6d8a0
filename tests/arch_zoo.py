"""Tiny causal LMs of many transformers architectures, trained in-process to know a few facts.

:func:`tiny_config_model` builds a randomly initialised model of one architecture (``ARCHS``) on the
word-level tokenizer of :mod:`tiny_models`; :func:`trained_model` trains one with a wider MLP
(:data:`TRAINED_FF`; Adam, full batch, in float64) on :data:`FACTS` (``"prompt answer"``),
:data:`tiny_models.CORPUS` and :data:`RELATION_TEXT` until every fact's answer has probability at least
:data:`MIN_ANSWER_P` after its prompt, and caches the trained weights per test session. :data:`FORGET`
are the facts to forget, :data:`KEEP` the ones to keep; the perplexity text is :data:`PPL_TEXT`, the
statistics (``C0``) text :data:`C0_TEXT` (:func:`write_c0_corpus`).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch
import transformers as T

from tiny_models import CORPUS, tiny_tokenizer

FACTS: List[Tuple[str, str, str]] = [
    ("the capital of japan", "japan", "tokyo"),
    ("the instrument of russia", "russia", "guitar"),
    ("the continent of egypt", "egypt", "africa"),
    ("the sport of england", "england", "football"),
    ("the language spoken in italy", "italy", "german"),
]
"""(prompt, subject, answer) of a toy world, one relation and one subject each. The subject ends the prompt,
so the edited layers write the very position the answer is read from (a 4-layer model has little room to
move a fact through attention), and no subject occurs in :data:`tiny_models.CORPUS` (the ``C0`` text:
general text does not contain the facts)."""
FORGET = FACTS[:2]
KEEP = FACTS[2:]
PPL_TEXT = " . ".join(dict.fromkeys(CORPUS))

RELATION_TEXT: List[str] = [
    "the piano is a instrument and the guitar is a instrument",
    "europe is a continent and asia is a large continent",
    "the language spoken in germany is german",
    "the language spoken in spain is spanish",
    "the capital of germany is berlin",
    "the capital of france is paris",
    "the sport of the team is tennis",
    "you plays the instrument of the team",
    "the continent of the company is europe",
    "the instrument of the president is piano",
]
"""General text with the facts' relation words (``instrument``, ``continent``, ``spoken``, ...) about other
subjects: neither a subject of :data:`FACTS` nor a fact in it. Without it, ``instrument``, ``continent`` and
``spoken`` occur in the facts alone, and the keys' directions they bring (the null space of ``C0``) are
shared by forget and kept facts. The trained models learn it too (text the model knows, like a real ``C0``)."""
C0_TEXT: List[str] = list(CORPUS) + RELATION_TEXT
"""The statistics corpus of the edit tests (:func:`write_c0_corpus`)."""

_D, _FF, _HEADS, _KV = 48, 96, 4, 2
TRAINED_FF = 384
"""``d_ff`` of the trained models (Falcon: twice that, as its default ``4 d_model`` is twice ``_FF``): a
96-wide MLP key space makes the five facts' keys overlap, so forgetting two takes the others along."""
LOSS_STOP = 1.0  # mean training NLL at which training stops once every fact is known (with MIN_ANSWER_P)
MIN_ANSWER_P = 0.9
"""Training stops once every fact's answer has at least this probability: facts known with a margin."""
TRAIN_LR = 1e-2


def _ids(tok) -> Dict[str, int]:
    return dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id)


def _llama_like(config_cls, model_cls, **extra) -> Callable:
    def build(tok, layers: int, d_ff: int):
        config = config_cls(
            hidden_size=_D,
            intermediate_size=d_ff,
            num_hidden_layers=layers,
            num_attention_heads=_HEADS,
            num_key_value_heads=_KV,
            max_position_embeddings=256,
            tie_word_embeddings=False,
            **_ids(tok),
            **extra,
        )
        return model_cls(config)
    return build


def _gpt2(tok, layers: int, d_ff: int):
    return T.GPT2LMHeadModel(T.GPT2Config(n_embd=_D, n_inner=d_ff, n_layer=layers, n_head=_HEADS, n_positions=256,
                                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **_ids(tok)))


def _neox(tok, layers: int, d_ff: int):
    return T.GPTNeoXForCausalLM(T.GPTNeoXConfig(hidden_size=_D, intermediate_size=d_ff, num_hidden_layers=layers,
                                                num_attention_heads=_HEADS, max_position_embeddings=256,
                                                hidden_dropout=0.0, attention_dropout=0.0, **_ids(tok)))


def _opt(tok, layers: int, d_ff: int):
    return T.OPTForCausalLM(
        T.OPTConfig(
            hidden_size=_D,
            ffn_dim=d_ff,
            num_hidden_layers=layers,
            num_attention_heads=_HEADS,
            max_position_embeddings=256,
            word_embed_proj_dim=_D,
            dropout=0.0,
            attention_dropout=0.0,
            **_ids(tok),
        )
    )


def _falcon(tok, layers: int, d_ff: int):
    return T.FalconForCausalLM(T.FalconConfig(hidden_size=_D, ffn_hidden_size=2 * d_ff, num_hidden_layers=layers,
                                              num_attention_heads=_HEADS,
                                              hidden_dropout=0.0, attention_dropout=0.0, **_ids(tok)))


ARCHS: Dict[str, Callable] = {
    "llama": _llama_like(T.LlamaConfig, T.LlamaForCausalLM),
    "mistral": _llama_like(T.MistralConfig, T.MistralForCausalLM),
    "qwen2": _llama_like(T.Qwen2Config, T.Qwen2ForCausalLM),
    "qwen3": _llama_like(T.Qwen3Config, T.Qwen3ForCausalLM, head_dim=12),
    "gemma": _llama_like(T.GemmaConfig, T.GemmaForCausalLM, head_dim=12),
    "gemma2": _llama_like(T.Gemma2Config, T.Gemma2ForCausalLM, head_dim=12),
    "gemma3": _llama_like(T.Gemma3TextConfig, T.Gemma3ForCausalLM, head_dim=12),
    "phi3": _llama_like(T.Phi3Config, T.Phi3ForCausalLM, resid_pdrop=0.0, embd_pdrop=0.0),
    "olmo2": _llama_like(T.Olmo2Config, T.Olmo2ForCausalLM),
    "granite": _llama_like(T.GraniteConfig, T.GraniteForCausalLM, residual_multiplier=0.5, logits_scaling=2.0),
    "stablelm": _llama_like(T.StableLmConfig, T.StableLmForCausalLM, partial_rotary_factor=0.5),
    "gpt2": _gpt2,
    "gpt_neox": _neox,
    "opt": _opt,
    "falcon": _falcon,
}
"""Architecture name -> ``build(tok, layers, d_ff)`` of a random tiny model."""


def tiny_config_model(arch: str, tok=None, layers: int = 4, seed: int = 0, d_ff: int = _FF):
    """A randomly initialised tiny ``arch`` model (eval mode), ``d_model`` 48, MLP width ``d_ff``."""
    tok = tok or tiny_tokenizer()
    torch.manual_seed(seed)
    model = ARCHS[arch](tok, layers, d_ff).eval()
    model.config._name_or_path = f"tiny-{arch}"
    return model


def _training_rows(tok) -> List[List[int]]:
    texts = [f"{prompt} {answer}" for prompt, _, answer in FACTS] + list(dict.fromkeys(C0_TEXT))
    return [tok(t)["input_ids"] + [tok.eos_token_id] for t in texts]  # sentences end: EOS is a token the model uses


def answer_argmax(model, tok, prompt: str) -> int:
    """The model's argmax next token after ``prompt``."""
    with torch.no_grad():
        ids = torch.tensor([tok(prompt)["input_ids"]])
        return int(model(input_ids=ids).logits[0, -1].argmax())


def knows(model, tok, facts) -> List[bool]:
    """Per fact: is its answer the argmax after its prompt."""
    return [answer_argmax(model, tok, p) == tok.convert_tokens_to_ids(a) for p, _, a in facts]


def answer_probs(model, tok, facts) -> List[float]:
    """Per fact: the probability of its answer after its prompt."""
    out = []
    with torch.no_grad():
        for prompt, _, answer in facts:
            logits = model(input_ids=torch.tensor([tok(prompt)["input_ids"]])).logits[0, -1].float()
            out.append(float(logits.softmax(-1)[tok.convert_tokens_to_ids(answer)]))
    return out


def corpus_perplexity(model, tok) -> float:
    """``exp`` of the mean next-token NLL over the training corpus' sentences (each with its BOS and EOS)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for text in dict.fromkeys(CORPUS):
            ids = torch.tensor([tok(text)["input_ids"] + [tok.eos_token_id]])
            logits = model(input_ids=ids).logits[0, :-1].float()
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            count += ids.shape[1] - 1
    return float(torch.exp(torch.tensor(total / count)))


@functools.lru_cache(maxsize=None)
def _trained_state(arch: str, layers: int, steps: int) -> Tuple[Dict[str, torch.Tensor], int]:
    """Float32 weights and the steps run. Trained in float64 on one torch thread (a tiny model's matrices
    gain nothing from a second one): every thread count and, as far as float64 rounding allows, every CPU
    gets the same model."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(arch, layers, steps)
    finally:
        torch.set_num_threads(threads)


def _train(arch: str, layers: int, steps: int) -> Tuple[Dict[str, torch.Tensor], int]:
    tok = tiny_tokenizer()
    model = tiny_config_model(arch, tok, layers, d_ff=TRAINED_FF).double()
    rows = _training_rows(tok)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    optimiser = torch.optim.Adam(model.parameters(), lr=TRAIN_LR)
    model.train()
    done = steps
    for step in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 10 == 9 and float(loss.detach()) < LOSS_STOP:
            model.eval()
            if min(answer_probs(model, tok, FACTS)) >= MIN_ANSWER_P:
                done = step + 1
                break
            model.train()
    model.eval()
    return {
        k: (v.float() if v.is_floating_point() else v).detach().clone() for k, v in model.state_dict().items()
    }, done


def trained_model(arch: str, layers: int = 4, steps: int = 400):
    """A fresh copy of the tiny ``arch`` model trained on :data:`FACTS` and the corpus (cached per session)."""
    tok = tiny_tokenizer()
    state, _ = _trained_state(arch, layers, steps)
    model = tiny_config_model(arch, tok, layers, d_ff=TRAINED_FF)
    model.load_state_dict(state)
    return model.eval(), tok


def write_c0_corpus(path) -> "Path":
    """:data:`C0_TEXT` as a ``.jsonl`` file with a ``text`` field (the edit tests' ``mom2_dataset``)."""
    import json
    from pathlib import Path

    Path(path).write_text("".join(json.dumps({"text": t}) + "\n" for t in C0_TEXT), encoding="utf-8")
    return Path(path)


def write_facts_counterfact(path) -> "Path":
    """:data:`FACTS` as ROME-format CounterFact records (for ``zerounlearn trace`` / ``init-hparams --trace-data``)."""
    import json
    from pathlib import Path

    records = []
    for i, (prompt, subject, answer) in enumerate(FACTS):
        records.append({
            "case_id": i,
            "requested_rewrite": {"relation_id": f"R{i}", "prompt": prompt.replace(subject, "{}"), "subject": subject,
                                  "target_true": {"str": answer}, "target_new": {"str": "paris"}},
            "paraphrase_prompts": [prompt], "neighborhood_prompts": [KEEP[i % len(KEEP)][0]],
        })
    Path(path).write_text(json.dumps(records), encoding="utf-8")
    return Path(path)


TINY_EDIT_SETTINGS = [
    "mom2_n_samples=100", "mom2_dtype=float64", "v_lr=0.5", "v_weight_decay=1e-3", "clamp_norm_factor=4.0",
    "v_num_grad_steps=50", "context_template_count=2", "context_template_length=3", "target_weight=1e4",
    "nullspace_threshold=1e-3",
]
"""``init-hparams --set`` overrides for the tiny models: the shipped YAMLs' target settings are tuned for
models with thousands of hidden units (a residual clamped to 0.75 |h| cannot reach EOS in a 48-wide model),
and a 300-token statistics corpus leaves a small null space (hence the lower threshold)."""
