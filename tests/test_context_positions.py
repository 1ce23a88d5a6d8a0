"""Subject-token context protection (``context_positions: subject``, opt-in; issue 10).

The position probe (benchmarks/surgical/position_probe.py) found that a lost sibling is often broken at
a subject token *before* the last one ("ota" of "Toyota Vitz" when "Toyota Corolla" is forgotten):
there the two prompts have the very same key. ``context_positions: subject`` makes the context second
moment sum over exactly those tokens of the forget (and retain) prompts.
"""
from __future__ import annotations

import pytest
import torch

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model
from zerounlearn_editor.contexts import context_prefixes
from zerounlearn_editor.encoding import encode_rows
from zerounlearn_editor.hparams import HParamsError
from zerounlearn_editor.model_access import capture_inputs, get_module, get_weight_matrix
from zerounlearn_editor.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.representations import context_position_mask, read_keys_and_hidden
from zerounlearn_editor.requests import normalize_requests

LAYER = 2
MODULE = f"model.layers.{LAYER}.mlp.down_proj"
# multi-token subjects (the tiny tokenizer is word level): the protected tokens are "new", "old", "large"
FORGET = [
    {"prompt": "the capital of new france is", "subject": "new france", "ground_truth": "paris"},
    {"prompt": "the capital of old germany is", "subject": "old germany", "ground_truth": "berlin"},
    {"prompt": "the capital of large japan is", "subject": "large japan", "ground_truth": "tokyo"},
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def setup(tok, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ctxpos")
    paths = (tmp / "stats", write_corpus(tmp / "corpus.jsonl"))
    model = tiny_llama(tok)
    hp = _hp(paths)
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    targets = neutral_targets(model, tok, FORGET, hp)
    return model, paths, moments, targets


def _hp(paths, **overrides) -> ZeroUnlearnGDHyperParams:
    return ZeroUnlearnGDHyperParams.from_dict(
        tiny_hparams_dict(*paths, alg_name="ZeroUnlearn-GD", layers=[LAYER], nullspace_threshold=1e-2, **overrides)
    )


def test_subject_start_marks_the_subjects_first_token(tok):
    contexts = ["", "the city . ", "a "]
    prefixes, subjects, suffixes = ["the capital of ", "", "it was "], ["new france", "old germany", "paris"], [" is", " is", ""]
    batch = encode_rows(tok, contexts, prefixes, subjects, suffixes)
    for row in range(3):
        start, last = int(batch.subject_start[row]), int(batch.lookup[row])
        subject_ids = tok(subjects[row], add_special_tokens=False)["input_ids"]
        assert batch.input_ids[row, start : last + 1].tolist() == subject_ids
    assert encode_rows(tok, contexts, prefixes, subjects, suffixes, fact_token="last").subject_start is None


def test_subject_mask_is_the_subject_before_its_last_token(tok):
    batch = encode_rows(tok, ["", ""], ["the capital of ", "the capital of "], ["new france", "japan"], [" is", " is"])
    mask = context_position_mask(batch, "subject")
    assert mask[0].nonzero().flatten().tolist() == [4]  # [BOS] the capital of *new* france is
    assert not mask[1].any()  # a one-token subject has nothing before its last token
    everything = context_position_mask(batch, "all")
    assert everything[0].tolist() == [False, True, True, True, True, False, True]
    with pytest.raises(ValueError, match="context positions"):
        context_position_mask(batch, "template")


def test_subject_context_moment_sums_exactly_those_keys(setup, tok):
    model, paths, _, _ = setup
    hp = _hp(paths)
    prefixes = context_prefixes(model, tok, hp.context_template_count, hp.context_template_length, hp.context_seed)
    requests = normalize_requests(FORGET)
    readout = read_keys_and_hidden(model, tok, requests, prefixes, MODULE, f"model.layers.{LAYER}", "subject_last", 8,
                                   context_moment=True, context_positions="subject")
    rows = [r for r in requests for _ in prefixes]
    batch = encode_rows(tok, [p for _ in requests for p in prefixes], [r.prefix for r in rows],
                        [r.subject for r in rows], [r.suffix for r in rows])
    with torch.no_grad(), capture_inputs(model, [MODULE]) as inputs:
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    keys = []
    for row in range(len(rows)):
        for pos in range(int(batch.subject_start[row]), int(batch.lookup[row])):
            keys.append(inputs[MODULE][row, pos].double())
    K = torch.stack(keys)
    assert readout.context_count == len(keys) == len(rows)  # one token before each subject's last
    torch.testing.assert_close(readout.context_mom2, K.t() @ K, rtol=1e-6, atol=1e-8)


def _subject_keys(model, tok, hp) -> torch.Tensor:
    """Keys ``[d_in, m]`` at the forget prompts' subject tokens before the last (bare prompts)."""
    requests = normalize_requests(FORGET)
    batch = encode_rows(tok, [""] * len(requests), [r.prefix for r in requests], [r.subject for r in requests],
                        [r.suffix for r in requests])
    with torch.no_grad(), capture_inputs(model, [MODULE]) as inputs:
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    mask = context_position_mask(batch, "subject")
    return inputs[MODULE][mask].double().t()


def test_subject_protection_keeps_the_shared_subject_tokens_output(setup, tok):
    """With the subject tokens protected, ``dW k`` on those keys (what a sibling "new X" shares with
    "new france") falls > 10x below the unprotected edit's, and the forget keys still move."""
    model, paths, moments, targets = setup

    def change(**overrides):
        hp = _hp(paths, **overrides)
        edited, _ = apply_zerounlearn_gd_to_model(model, tok, FORGET, hp, copy=True, second_moments=moments,
                                                  targets=targets, progress=False)
        W0 = get_weight_matrix(get_module(model, MODULE)).detach().double()
        W1 = get_weight_matrix(get_module(edited, MODULE)).detach().double()
        K = _subject_keys(model, tok, hp)
        return float(((W1 - W0) @ K).norm(dim=0).div((W0 @ K).norm(dim=0)).max()), float((W1 - W0).norm())

    plain, plain_norm = change()
    kept, kept_norm = change(context_nullspace_weight=1e4, context_positions="subject")
    assert plain > 1e-2
    assert kept < plain / 10
    assert kept_norm > 0.1 * plain_norm  # still an edit


def test_context_positions_key_is_validated(tmp_path):
    paths = (tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"))
    with pytest.raises(HParamsError, match="context_positions"):
        _hp(paths, context_positions="template")
    assert _hp(paths).context_positions == "all"  # the default: every context token, as before
    with pytest.raises(HParamsError, match="no effect"):
        _hp(paths, context_positions="subject")  # without a context weight it would be silently ignored
    assert _hp(paths, context_positions="subject", context_nullspace_weight=1.0).context_positions == "subject"
