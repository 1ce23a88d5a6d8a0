"""``suppress_rank_limit`` (opt-in; graduated from ``experimental:``): only requests whose answer ranks at most
``R`` after the bare prompt take target steps; the others keep the residual 0. Without the key (``null``) the loop
and its cache keys are the paper's (``suppress_answer``'s) as before."""
from __future__ import annotations

from dataclasses import replace
from typing import List

import pytest
import torch

from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor.engine.encoding import target_token_ids
from zerounlearn_editor.engine.hparams import STEP_RANK_KEY, HParamsError
from zerounlearn_editor.engine.pipeline import neutral_targets, target_settings
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.engine.targets import TargetConfig, optimise_neutral_targets
from zerounlearn_editor.engine.targets.rows import answer_ranks


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _bare_logits(model, tok, prompt: str) -> torch.Tensor:
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits[0, -1].float()


def _requests_at_ranks(model, tok, ranks: List[int]) -> List[dict]:
    """The tiny forget requests, request ``i``'s answer the ``ranks[i]``-th non-special word at its bare prompt;
    ``ground_truth`` and the answer's true rank over the whole vocabulary (special tokens included) in ``rank``."""
    special = set(tok.all_special_ids)
    requests = forget_requests()
    for request, wanted in zip(requests, ranks):
        logits = _bare_logits(model, tok, request["prompt"])
        order = [int(i) for i in torch.argsort(logits, descending=True) if int(i) not in special]
        token = order[wanted]
        request["ground_truth"] = tok.convert_ids_to_tokens(token)
        request["rank"] = int((logits > logits[token]).sum())
    return requests


def _hp(tmp_path, **changes):
    # a stop no request reaches at step 0: without the key every request steps
    base = dict(target_objective="suppress_answer", v_early_stop_loss=1e-9, v_num_grad_steps=4,
                targets_optimizer="adam")
    base.update(changes)
    return tiny_gd_target_hparams(tmp_path, **base)


def test_answer_ranks_count_the_tokens_scoring_strictly_higher():
    logits = torch.tensor([[0.1, 2.0, -1.0, 0.5], [3.0, 3.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    tokens = torch.tensor([3, 1, 2])
    assert answer_ranks(logits, tokens).tolist() == [1, 0, 0]  # a tie does not push the answer down
    torch.manual_seed(1)
    big = torch.randn(5, 50)
    tokens = torch.randint(0, 50, (5,))
    by_sort = [int((torch.argsort(row, descending=True) == t).nonzero()) for row, t in zip(big, tokens)]
    assert answer_ranks(big, tokens).tolist() == by_sort


@pytest.mark.parametrize("optimizer", ["adam", "adam_kv"])
def test_only_requests_ranked_within_the_limit_take_steps(tok, tmp_path, optimizer):
    model = sharp_tiny_llama(tok)
    requests = _requests_at_ranks(model, tok, [0, 2, 5])
    ranks = [r.pop("rank") for r in requests]
    assert ranks[0] == 0 and 0 < ranks[1] < ranks[2], ranks
    every = neutral_targets(model, tok, requests, _hp(tmp_path, targets_optimizer=optimizer))
    assert all(s > 0 for s in every.steps_run), every.steps_run  # without the key all three step
    for limit in (0, ranks[1], ranks[2]):
        hp = _hp(tmp_path, targets_optimizer=optimizer, suppress_rank_limit=limit)
        held = neutral_targets(model, tok, requests, hp)
        for i, rank in enumerate(ranks):
            if rank <= limit:  # steps as without the key
                assert held.steps_run[i] == every.steps_run[i], (limit, held.steps_run, every.steps_run)
                torch.testing.assert_close(held.z[i], every.z[i], rtol=1e-5, atol=1e-5)
            else:  # held back: no step, its target is its unedited state
                assert held.steps_run[i] == 0, (limit, held.steps_run)
                assert torch.equal(held.z[i], held.h0[i])
        torch.testing.assert_close(held.h0, every.h0)


def test_without_the_key_the_cache_keys_are_as_before(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    assert "step_rank_limit" not in target_settings(model, _hp(tmp_path))
    assert "step_rank_limit" not in target_settings(model, tiny_gd_target_hparams(tmp_path))
    keyed = target_settings(model, _hp(tmp_path, suppress_rank_limit=0))
    assert keyed["step_rank_limit"] == 0
    assert keyed != target_settings(model, _hp(tmp_path, suppress_rank_limit=3))


@pytest.mark.parametrize("value, says", [(-1, "must be an integer >= 0"), (1.5, "has value 1.5, expected"),
                                         (True, "has value True, expected"), ("0", "has value .0., expected")])
def test_a_bad_limit_is_refused_naming_the_key(tmp_path, value, says):
    with pytest.raises(HParamsError, match=f"key '{STEP_RANK_KEY}' {says}"):
        _hp(tmp_path, suppress_rank_limit=value)


def test_the_limit_needs_answer_suppression_targets(tmp_path):
    with pytest.raises(HParamsError, match="target_objective: suppress_answer.*'neutral'"):
        tiny_gd_target_hparams(tmp_path, suppress_rank_limit=0)
    assert tiny_gd_target_hparams(tmp_path).suppress_rank_limit is None  # the paper's loop by default


def test_the_experimental_form_is_refused_naming_the_key(tmp_path):
    with pytest.raises(HParamsError, match=f"'experimental.{STEP_RANK_KEY}' graduated to the top-level key"):
        _hp(tmp_path, experimental={STEP_RANK_KEY: 0})


def test_the_limit_needs_the_bare_prompt_first(tok):
    """The rank is read in each request's first rewriting row, so the first context prefix must be the bare prompt;
    without the limit any prefix order is accepted as before."""
    model = sharp_tiny_llama(tok)
    requests = normalize_requests(_requests_at_ranks(model, tok, [0, 2, 5]), distinct_answers=True)
    targets = [target_token_ids(tok, r.answer) for r in requests]
    cfg = TargetConfig(
        layer_module="model.layers.1", ln_f_module="model.norm", lm_head_module="lm_head", loss_layer_module="",
        fact_token="subject_last", steps=2, lr=0.5, weight_decay=1e-3, clamp_norm_factor=4.0, kl_factor=0.1,
        early_stop_loss=1e-9, chunk_size=8, objective="suppress_answer",
    )
    prefixes = ["one two. ", ""]
    assert len(optimise_neutral_targets(model, tok, requests, targets, prefixes, cfg).steps_run) == 3
    with pytest.raises(ValueError, match="suppress_rank_limit reads the answer's rank in the bare prompt"):
        optimise_neutral_targets(model, tok, requests, targets, prefixes, replace(cfg, step_rank_limit=0))
    held = optimise_neutral_targets(model, tok, requests, targets, prefixes[::-1], replace(cfg, step_rank_limit=0))
    assert held.steps_run[0] > 0 and held.steps_run[1:] == [0, 0]
