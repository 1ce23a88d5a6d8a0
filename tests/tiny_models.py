"""Tiny Llama / GPT-2 / Qwen3 models and a word-level tokenizer, built in-process (no downloads)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
"""The checkout the tests run from (``tests/`` is laid out like the package: ``tests/<area>/test_*.py``)."""
FIXTURES = TESTS_DIR / "fixtures"
"""Stored test data: the pins (``paper_pin.npz``, ``yaml_pins.npz``, ``cli_pins.json``) and the known-fact ids."""

WORDS = (
    "the capital of france is paris germany berlin italy rome spain madrid japan tokyo "
    "a city in and it was known for its river old new large small people live there many "
    "because therefore i you when however this that language spoken mother tongue france's "
    "england london egypt cairo russia moscow was born president plays instrument piano guitar "
    "located continent europe asia africa sport football tennis team works for company"
).split()

CORPUS = [
    "the city of paris is a large city in france",
    "many people live in london and it was known for its river",
    "berlin is a city in germany and the people there speak german",
    "the river in rome is old and the city is large",
    "tokyo is in asia and many people live there",
    "the president was born in cairo because people there live",
    "you plays piano and i plays guitar in the team",
    "however the company works for many people in europe",
    "madrid is the capital of spain and its language is spanish",
    "this sport is football and that sport is tennis",
] * 3

SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]


def tiny_tokenizer(bos: bool = True) -> PreTrainedTokenizerFast:
    """Word-level tokenizer over :data:`WORDS` (+ words of the corpus), BOS prepended."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for word in list(WORDS) + [w for line in CORPUS for w in line.split()] + ["german", "spanish", "."]:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")
    if bos:
        backend.post_processor = processors.TemplateProcessing(
            single="[BOS] $A", pair="[BOS] $A [BOS] $B", special_tokens=[("[BOS]", vocab["[BOS]"])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]", unk_token="[UNK]"
    )


def _vocab_size(tok) -> int:
    return len(tok)


def tiny_llama(tok=None, seed: int = 0, layers: int = 4) -> LlamaForCausalLM:
    tok = tok or tiny_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=_vocab_size(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    model.config._name_or_path = "tiny-llama"
    return model


INIT_PREFIX = "init__"
"""Key prefix of a pin file's stored initial weights (:func:`init_arrays`, :func:`pinned_tiny_llama`)."""


def state_digest(model) -> str:
    """SHA-256 of a model's state dict (names and bytes, in name order)."""
    import hashlib

    h = hashlib.sha256()
    for key, p in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(p.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def init_arrays(model) -> Dict[str, Any]:
    """``{INIT_PREFIX + name: array}`` of a model's state dict, for a pin file."""
    return {INIT_PREFIX + k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def pinned_tiny_llama(pin: Dict[str, Any], layers: int = 4, max_init_deviation: float = 1e-6) -> LlamaForCausalLM:
    """:func:`tiny_llama` holding the initial weights a pin file stored (:func:`init_arrays`), bit for bit.

    Torch's ``normal_`` kernel rounds differently per CPU capability (``ATEN_CPU_CAPABILITY=default`` vs
    ``avx2``/``avx512``: up to 5e-7 of the largest weight), so the seeded initialisation is not the same model on
    every machine; a pin feeds its own. The model torch builds here must still agree with the stored one to
    ``max_init_deviation`` (max abs difference / max abs weight, per tensor): a changed initialisation scheme (a
    transformers upgrade) fails here rather than as a moved pin."""
    model = tiny_llama(tiny_tokenizer(), layers=layers)
    stored = {k[len(INIT_PREFIX):]: v for k, v in pin.items() if k.startswith(INIT_PREFIX)}
    built = model.state_dict()
    if set(stored) != set(built):
        raise AssertionError(f"the pin's initial weights name other tensors: {sorted(set(stored) ^ set(built))[:5]}")
    for key, value in stored.items():
        here = built[key].detach().numpy()
        scale = max(float(abs(value).max()), 1e-30)
        deviation = float(abs(here.astype("float64") - value.astype("float64")).max()) / scale
        if here.shape != value.shape or deviation > max_init_deviation:
            raise AssertionError(f"the tiny model's initial {key} moved from the pinned one by {deviation:.2e} of its "
                                 f"largest weight (allowed {max_init_deviation:g}): its initialisation changed")
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in stored.items()}, strict=True)
    return model


def tiny_qwen3(tok=None, seed: int = 0, layers: int = 4) -> Qwen3ForCausalLM:
    tok = tok or tiny_tokenizer()
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=_vocab_size(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = Qwen3ForCausalLM(config).eval()
    model.config._name_or_path = "tiny-qwen3"
    return model


def tiny_gpt2(tok=None, seed: int = 0, layers: int = 4) -> GPT2LMHeadModel:
    tok = tok or tiny_tokenizer()
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=_vocab_size(tok),
        n_embd=32,
        n_inner=64,
        n_layer=layers,
        n_head=4,
        n_positions=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config).eval()
    model.config._name_or_path = "tiny-gpt2"
    return model


TINY_BUILDERS = {"llama": tiny_llama, "gpt2": tiny_gpt2, "qwen3": tiny_qwen3}
"""The tiny model of each architecture family the parametrised engine tests run on."""

PADDED_PREFIXES = ["", "one two. ", "a b c d e. "]
"""Context prefixes of different lengths: the bare prompt first, and padding in every pass or chunk."""


LLAMA_TEMPLATES = dict(
    rewrite_module_tmp="model.layers.{}.mlp.down_proj",
    layer_module_tmp="model.layers.{}",
    mlp_module_tmp="model.layers.{}.mlp",
    ln_f_module="model.norm",
    lm_head_module="lm_head",
)
GPT2_TEMPLATES = dict(
    rewrite_module_tmp="transformer.h.{}.mlp.c_proj",
    layer_module_tmp="transformer.h.{}",
    mlp_module_tmp="transformer.h.{}.mlp",
    ln_f_module="transformer.ln_f",
    lm_head_module="lm_head",
)


def write_corpus(path: Path) -> Path:
    """Write :data:`CORPUS` as a ``.jsonl`` file with a ``text`` field."""
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS), encoding="utf-8")
    return path


def saved_tiny_llama(root: Path, name: str = "tiny-model") -> Tuple[Path, Path]:
    """A :func:`tiny_llama` and its tokenizer saved as the folder ``root / name``, and :data:`CORPUS` written to
    ``root / "corpus.jsonl"``: ``(model folder, corpus file)`` (the unlearn CLI tests' base model)."""
    tok = tiny_tokenizer()
    folder = root / name
    tiny_llama(tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, write_corpus(root / "corpus.jsonl")


TINY_FACTS = [
    ("france", "paris"),
    ("germany", "berlin"),
    ("italy", "rome"),
    ("spain", "madrid"),
    ("japan", "tokyo"),
    ("england", "london"),
    ("egypt", "cairo"),
    ("russia", "moscow"),
]


def tiny_counterfact_record(index: int, subject: str, answer: str) -> Dict[str, Any]:
    """A ROME-format CounterFact record about a capital; neighbours ask about the next country."""
    other = TINY_FACTS[(index + 1) % len(TINY_FACTS)][0]
    return {
        "case_id": index,
        "requested_rewrite": {
            "relation_id": "P36",
            "prompt": "the capital of {} is",
            "subject": subject,
            "target_true": {"str": answer},
            "target_new": {"str": "paris"},
        },
        "paraphrase_prompts": [f"the capital city of {subject} is", f"this capital of {subject} is"],
        "neighborhood_prompts": [f"the old city in {other} is", f"many people live in {other} and the city is"],
    }


def write_tiny_counterfact(path: Path) -> Path:
    """Write one :func:`tiny_counterfact_record` per :data:`TINY_FACTS` entry as a JSON list."""
    records = [tiny_counterfact_record(i, s, a) for i, (s, a) in enumerate(TINY_FACTS)]
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def tiny_hparams_dict(stats_dir: Path, corpus: Path, alg_name: str = "ZeroUnlearn", gpt2: bool = False, **overrides):
    config = dict(
        alg_name=alg_name,
        model_name="tiny",
        device="cpu",
        layers=[1, 2],
        context_template_count=2,
        context_template_length=3,
        v_num_grad_steps=10,
        v_lr=0.5,
        v_loss_layer=-1,
        stats_dir=str(stats_dir),
        mom2_dataset=str(corpus),
        mom2_n_samples=100,
        mom2_dtype="float64",
        mom2_max_length=32,
        **(GPT2_TEMPLATES if gpt2 else LLAMA_TEMPLATES),
    )
    if alg_name == "ZeroUnlearn":
        config.update(utility_weight=10.0)
    config.update(overrides)
    return config


def forget_requests() -> List[dict]:
    return [
        {"prompt": "the capital of france is", "subject": "france", "ground_truth": "paris", "target_new": ""},
        {"prompt": "the capital of germany is", "subject": "germany", "ground_truth": "berlin", "target_new": ""},
        {"prompt": "the capital of japan is", "subject": "japan", "ground_truth": "tokyo"},
    ]


def sharp_tiny_llama(tok) -> LlamaForCausalLM:
    """:func:`tiny_llama` with its output head scaled 30x: sharp predictions, so a target residual has
    something to move (the neutral-target tests)."""
    model = tiny_llama(tok)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    return model.eval()


def tiny_gd_target_hparams(tmp_path: Path, **changes):
    """ZeroUnlearn-GD hparams for the target tests on :func:`sharp_tiny_llama` (``changes`` override keys)."""
    from zerounlearn_editor import ZeroUnlearnGDHyperParams

    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "c.jsonl"), alg_name="ZeroUnlearn-GD",
                               nullspace_threshold=1e-2, v_num_grad_steps=15, clamp_norm_factor=4.0)
    config.update(changes)
    return ZeroUnlearnGDHyperParams.from_dict(config)


def with_head_bias(tok, model: torch.nn.Module, token: str, bias: float = 1e4) -> torch.nn.Module:
    """``model`` (eval mode) with a head that adds ``bias`` to ``token``'s logit: with a large bias its greedy next
    token is ``token`` after any context."""
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tok.convert_tokens_to_ids(token)] = bias
    model.lm_head = head
    return model.eval()
