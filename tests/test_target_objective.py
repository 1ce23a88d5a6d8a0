"""Answer-suppression targets (opt-in ``target_objective: suppress_answer``): maths, plumbing, refusals.

The paper's objective (``neutral``: maximise the likelihood of EOS) stays the default and keeps its
cache keys; ``suppress_answer`` optimises each residual to push the request's own answer down.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from tiny_models import forget_requests, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import ZeroUnlearnGDHyperParams
from zerounlearn_editor.hparams import HParamsError
from zerounlearn_editor.pipeline import batched_statistics, neutral_targets, target_settings
from zerounlearn_editor.targets import token_loss
from zerounlearn_editor.zerounlearn_gd_main import apply_zerounlearn_gd_to_model


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _model(tok):
    model = tiny_llama(tok)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)  # sharp predictions: the answer is likely before the edit
    return model.eval()


def _hp(tmp_path, **changes) -> ZeroUnlearnGDHyperParams:
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "c.jsonl"), alg_name="ZeroUnlearn-GD",
                               nullspace_threshold=1e-2, v_num_grad_steps=15, clamp_norm_factor=4.0)
    config.update(changes)
    return ZeroUnlearnGDHyperParams.from_dict(config)


def _known_requests(model, tok):
    """The tiny forget requests with ``ground_truth`` = the model's own top word at each prompt (it "knows" it)."""
    requests = forget_requests()
    special = set(tok.all_special_ids)
    for request in requests:
        ids = tok(request["prompt"], return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(ids).logits[0, -1].float()
        logits[list(special)] = -float("inf")
        request["ground_truth"] = tok.convert_ids_to_tokens(int(logits.argmax()))
    return requests


def _answer_prob(model, tok, request) -> float:
    """p(first answer token | prompt) of the current model."""
    ids = tok(request["prompt"], return_tensors="pt").input_ids
    answer = tok(" " + request["ground_truth"], add_special_tokens=False).input_ids[0]
    with torch.no_grad():
        return float(torch.softmax(model(ids).logits[0, -1].float(), -1)[answer])


def test_token_loss_is_the_nll_or_the_unlikelihood():
    p = torch.tensor([1e-6, 0.049, 0.5, 0.99, 1.0], dtype=torch.float64)
    logp = p.log()
    assert torch.allclose(token_loss(logp, "neutral"), -logp)
    expected = -torch.log1p(-p[:-1])
    assert torch.allclose(token_loss(logp, "suppress_answer")[:-1], expected, rtol=1e-6)
    assert math.isfinite(float(token_loss(logp, "suppress_answer")[-1]))  # p = 1: large, not inf
    # the early stop at 0.05 means p < 1 - exp(-0.05) = 0.0488
    assert float(token_loss(torch.tensor([math.log(0.048)]), "suppress_answer")) < 0.05
    assert float(token_loss(torch.tensor([math.log(0.050)]), "suppress_answer")) > 0.05
    with pytest.raises(ValueError, match="unknown target objective"):
        token_loss(logp, "eos")


def test_hparams_refuse_what_the_objective_cannot_do(tmp_path):
    with pytest.raises(HParamsError, match="targets_optimizer: adam"):
        _hp(tmp_path, target_objective="suppress_answer", targets_optimizer="lbfgs")
    with pytest.raises(HParamsError, match="target_objective"):
        _hp(tmp_path, target_objective="unlikelihood")
    assert _hp(tmp_path).target_objective == "neutral"  # the paper's default


def test_the_paper_keeps_its_target_cache_keys(tok, tmp_path):
    model = _model(tok)
    assert "objective" not in target_settings(model, _hp(tmp_path))
    assert target_settings(model, _hp(tmp_path, target_objective="suppress_answer"))["objective"] == "suppress_answer"


def test_suppression_targets_push_the_answer_down(tok, tmp_path):
    model = _model(tok)
    requests = _known_requests(model, tok)
    start = neutral_targets(model, tok, requests, _hp(tmp_path, target_objective="suppress_answer", v_num_grad_steps=0))
    supp = neutral_targets(model, tok, requests, _hp(tmp_path, target_objective="suppress_answer"))
    eos = neutral_targets(model, tok, requests, _hp(tmp_path))
    # -log(1 - p(answer)) fell for every request (on this tiny model the residual reaches its clamp first)
    assert torch.all(start.nll > 0.5), start.nll
    assert torch.all(supp.nll < 0.75 * start.nll), (start.nll, supp.nll)
    assert torch.equal(supp.h0, eos.h0)  # the same unedited state, another residual
    assert not torch.allclose(supp.z, eos.z)


def test_an_answer_already_suppressed_gets_no_residual(tok, tmp_path):
    """The early stop reads the suppression loss: p(answer) < 0.049 at step 0 -> residual 0, no step run."""
    model = _model(tok)
    requests = forget_requests()  # the tiny model gives these answers p < 0.01
    supp = neutral_targets(model, tok, requests, _hp(tmp_path, target_objective="suppress_answer"))
    assert torch.all(supp.nll < 0.05), supp.nll
    assert supp.steps_run == [0, 0, 0] and torch.equal(supp.z, supp.h0)
    eos = neutral_targets(model, tok, requests, _hp(tmp_path))  # the paper's objective still moves them
    assert float((eos.z - eos.h0).norm()) > 0


def test_an_edit_with_suppression_targets_forgets(tok, tmp_path):
    model = _model(tok)
    hp = _hp(tmp_path, target_objective="suppress_answer")
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    requests = _known_requests(model, tok)
    before = [_answer_prob(model, tok, r) for r in requests]
    assert min(before) > 0.2, before
    apply_zerounlearn_gd_to_model(model, tok, requests, hp, second_moments=moments, progress=False)
    after = [_answer_prob(model, tok, r) for r in requests]
    assert all(a < 0.5 * b for a, b in zip(after, before)), (before, after)


def test_a_request_without_an_answer_is_refused_and_the_model_unchanged(tok, tmp_path):
    model = _model(tok)
    original = copy.deepcopy(model.state_dict())
    hp = _hp(tmp_path, target_objective="suppress_answer")
    requests = forget_requests()
    del requests[1]["ground_truth"]
    with pytest.raises(ValueError, match=r"ground_truth.*\[1\]"):
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in original.items())
