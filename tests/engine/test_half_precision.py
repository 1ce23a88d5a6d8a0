"""Half precision: bfloat16 / float16 edits of a tiny Llama that knows 8 capitals, against float32.

The tiny Llama is trained in-process (float32, 200 Adam steps) until it answers all 8 prompts;
then the same weights are cast to each dtype and 3 capitals are unlearned with both methods.
Stated tolerances:

- the same forgotten / kept decisions (top-1 answer changed / unchanged) as in float32;
- every edited weight keeps the model's dtype, nothing else changes;
- the weight change ``dW`` within ``||dW_half - dW_32|| / ||dW_32|| < 0.02`` (fp16, 11-bit mantissa)
  and ``< 0.02 * 2^(11 - 8) = 0.16`` (bf16, 8-bit mantissa): the difference comes from the half
  model's forward passes (keys, targets), whose rounding scales with the unit roundoff; measured on an
  AVX2 CPU without native bf16 (issue 29.12): fp16 0.9-1.4%, bf16 7-13%, a ratio of 7-10 for every
  layer of both methods; writing the float32 edit into bf16 alone costs 0.2%;
- targets and keys come back in float32, whatever the model's dtype.

The half models get the float32 model's context prefixes (cached on the model before the cast).
The prefixes are a seeded random draw from the model (top-5 sampling); a half model's logits can draw
other tokens (on that CPU the bf16 model did), which gives another, equally valid edit: the float32
edit itself moves by 9-115% of its norm from ``context_seed`` 0 to 1, 2 or 3, and the bf16 edit with
its own prefixes moved by 49-97% (same decisions). The comparison below is of precision, so the draw
is shared.

The half-precision edits get the float32 model's ``C0`` (passed as ``second_moments``). With ``C0``
computed from the bf16 model itself, ZeroUnlearn-GD's null space moves more (relative ``dW``
difference 0.41 / 0.18 on that CPU, same decisions): its projector depends on the small eigenvalues
of ``C0``.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
)
from zerounlearn_editor.engine.contexts import CONTEXT_SEED, context_prefixes
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.engine.stats import layer_second_moments

FACTS = [
    ("the capital of france is", "france", "paris"), ("the capital of germany is", "germany", "berlin"),
    ("the capital of japan is", "japan", "tokyo"), ("the capital of italy is", "italy", "rome"),
    ("the capital of spain is", "spain", "madrid"), ("the capital of england is", "england", "london"),
    ("the capital of egypt is", "egypt", "cairo"), ("the capital of russia is", "russia", "moscow"),
]
FORGET, KEEP = FACTS[:3], FACTS[3:]
TOLERANCE = {torch.float16: 0.02, torch.bfloat16: 0.02 * 2 ** (11 - 8)}  # scaled by the unit roundoff (docstring)
METHODS = {
    "ZeroUnlearn": (ZeroUnlearnHyperParams, apply_zerounlearn_to_model),
    "ZeroUnlearn-GD": (ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model),
}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def knowing_llama(tok):
    """A float32 tiny Llama trained to answer all :data:`FACTS` (top-1)."""
    torch.manual_seed(0)
    model = tiny_llama(tok, layers=4).train()
    batch = torch.tensor([tok(f"{p} {a}")["input_ids"] for p, _, a in FACTS])
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(200):
        loss = model(batch, labels=batch).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    assert _top1(model, tok, FACTS) == [a for _, _, a in FACTS]
    return model


def _top1(model, tok, facts):
    with torch.no_grad():
        return [
            tok.convert_ids_to_tokens(int(model(tok(p, return_tensors="pt").input_ids).logits[0, -1].float().argmax()))
            for p, _, _ in facts
        ]


def _requests():
    return [{"prompt": p, "subject": s, "ground_truth": a, "target_new": ""} for p, s, a in FORGET]


def _edit(base, tok, method: str, dtype: torch.dtype, tmp_path: Path):
    cls, apply = METHODS[method]
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"), alg_name=method,
                               mom2_dtype="float32", v_num_grad_steps=25)
    hparams = cls.from_dict(config)
    # every dtype gets the float32 model's C0, passed explicitly: through the cache a float16 model does not
    # find it (model_fingerprint rounds float16 values to bfloat16 differently from float32 ones) and
    # recomputes it, which then also changes the C0 a later bfloat16 edit reads
    second_moments = batched_statistics(base, tok, hparams, hparams.mom2_dataset, progress=False)
    model = copy.deepcopy(base)
    context_prefixes(model, tok, config["context_template_count"], config["context_template_length"], 0)  # float32 draw
    model = model.to(dtype)  # the prefixes cached on the model stay
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model, weights_copy = apply(model, tok, _requests(), hparams, return_orig_weights=True, progress=False,
                                second_moments=second_moments)
    decisions = ([a != t for a, (_, _, t) in zip(_top1(model, tok, FORGET), FORGET)],
                 [a == t for a, (_, _, t) in zip(_top1(model, tok, KEEP), KEEP)])
    params = dict(model.named_parameters())
    delta = {name: params[name].detach().double() - weights_copy[name].double() for name in weights_copy}
    for name, value in model.state_dict().items():
        assert value.dtype == dtype, name
        if name not in weights_copy:
            assert torch.equal(value, before[name]), f"{name} changed but was not edited"
    return decisions, delta


@pytest.mark.parametrize("method", sorted(METHODS))
def test_half_precision_edits_match_float32(knowing_llama, tok, method, tmp_path: Path):
    reference, ref_delta = _edit(knowing_llama, tok, method, torch.float32, tmp_path)
    forgotten, kept = reference
    assert any(forgotten) and sum(kept) >= 3  # the float32 edit forgets and keeps: a decision worth comparing
    for dtype, tolerance in TOLERANCE.items():
        decisions, delta = _edit(knowing_llama, tok, method, dtype, tmp_path)
        assert decisions == reference, f"{method} {dtype}: decisions {decisions} vs float32 {reference}"
        for name, change in delta.items():
            assert change.abs().max() > 0, f"{name}: the {dtype} edit was lost in rounding"
            rel = float((change - ref_delta[name]).norm() / ref_delta[name].norm())
            assert rel < tolerance, f"{method} {dtype} {name}: relative change difference {rel:.3g} >= {tolerance}"


def test_targets_and_keys_are_float32_for_half_models(knowing_llama, tok, tmp_path: Path):
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"), v_num_grad_steps=5)
    hp = ZeroUnlearnHyperParams.from_dict(config)
    model = copy.deepcopy(knowing_llama).to(torch.bfloat16)
    targets = neutral_targets(model, tok, _requests(), hp)
    assert targets.z.dtype == targets.h0.dtype == torch.float32 and torch.isfinite(targets.z).all()
    prefixes = context_prefixes(model, tok, hp.context_template_count, hp.context_template_length, CONTEXT_SEED)
    readout = read_keys_and_hidden(
        model,
        tok,
        normalize_requests(_requests()),
        prefixes,
        hp.rewrite_module_tmp.format(1),
        hp.layer_module_tmp.format(2),
        hp.fact_token,
        8,
    )
    assert readout.keys.dtype == readout.hidden.dtype == torch.float32


def test_statistics_of_a_half_model_are_not_reused_by_a_float32_model(knowing_llama, tok, tmp_path: Path):
    corpus = str(write_corpus(tmp_path / "corpus.jsonl"))
    module = "model.layers.{}.mlp.down_proj"
    args = ([1], module, str(tmp_path / "stats"), corpus, 20, "float64", 32, 8, "tiny")
    half = layer_second_moments(copy.deepcopy(knowing_llama).to(torch.bfloat16), tok, *args, progress=False)[1]
    full = layer_second_moments(knowing_llama, tok, *args, progress=False)[1]  # recomputed, overwrites the cache
    assert not torch.equal(half.mom2, full.mom2)
    again = layer_second_moments(copy.deepcopy(knowing_llama).to(torch.bfloat16), tok, *args, progress=False)[1]
    assert torch.equal(again.mom2, full.mom2)  # a half model reuses float32 statistics
