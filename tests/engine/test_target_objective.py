"""Answer-suppression targets (opt-in ``target_objective: suppress_answer``): maths, plumbing, refusals.

The paper's objective (``neutral``: maximise the likelihood of EOS) stays the default and keeps its
cache keys; ``suppress_answer`` optimises each residual to push the request's own answer down.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets, target_settings
from zerounlearn_editor.engine.requests import RequestError
from zerounlearn_editor.engine.targets.rows import (
    answer_logprobs,
    suppression_loss,
    suppression_per_request,
)
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()




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


def test_answer_logprobs_match_log_softmax_and_keep_a_gradient_near_one():
    torch.manual_seed(0)
    logits = torch.randn(4, 7, dtype=torch.float64)
    tokens = torch.tensor([0, 3, 6, 2])
    expected = torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1)
    assert torch.allclose(answer_logprobs(logits, tokens), expected, atol=1e-12)
    # margin 30 nats in float32: log_softmax rounds to exactly 0, answer_logprobs keeps 1 - p and its gradient
    sharp = torch.zeros(1, 5)
    sharp[0, 2] = 30.0
    sharp.requires_grad_(True)
    assert float(torch.log_softmax(sharp, -1)[0, 2]) == 0.0
    logp = answer_logprobs(sharp, torch.tensor([2]))
    assert float(logp) < 0 and math.isclose(-float(logp), 4 * math.exp(-30), rel_tol=1e-3)
    suppression_loss(logp).sum().backward()
    assert float(sharp.grad[0, 2]) > 0  # descending the loss lowers the answer's logit


def test_suppression_loss_is_the_unlikelihood_with_the_stated_stop():
    p = torch.tensor([1e-6, 0.049, 0.5, 0.99], dtype=torch.float64)
    assert torch.allclose(suppression_loss(p.log()), -torch.log1p(-p), rtol=1e-9)
    assert math.isfinite(float(suppression_loss(torch.tensor([0.0]))))  # p = 1: large, not inf
    assert (
        float(suppression_loss(torch.tensor([math.log(0.0099)])))
        < 0.01
        < float(suppression_loss(torch.tensor([math.log(0.0101)])))
    )


def test_a_multi_token_answer_is_suppressed_as_a_sequence():
    """Two requests: 0 has a two-token answer in two rows (contexts), 1 a one-token answer in two rows."""
    logp_table = torch.tensor([[0.5, 0.9], [0.2, 0.8], [0.6, 0.0], [0.1, 0.0]]).log()  # per row: p of token 1, 2
    entries = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (3, 0)]  # (row, answer position)
    vocab = 3
    logits = torch.full((len(entries), vocab), -50.0, dtype=torch.float64)
    tokens = torch.zeros(len(entries), dtype=torch.long)
    for e, (row, k) in enumerate(entries):  # token 0 has probability p, token 1 the rest, token 2 ~0
        p = float(logp_table[row, k].exp())
        logits[e, 0], logits[e, 1] = math.log(p), math.log(1 - p)
    rows = torch.tensor([r for r, _ in entries])
    loss = suppression_per_request(logits, tokens, rows, torch.tensor([0, 0, 1, 1]), 2)
    seq = torch.tensor([0.5 * 0.9, 0.2 * 0.8, 0.6, 0.1], dtype=torch.float64)  # the answer's probability per row
    per_row = -torch.log1p(-seq)
    assert torch.allclose(loss, torch.stack([per_row[:2].mean(), per_row[2:].mean()]), atol=1e-9)


def test_hparams_refuse_what_the_objective_cannot_do(tmp_path):
    with pytest.raises(HParamsError, match="target_objective"):
        tiny_gd_target_hparams(tmp_path, target_objective="unlikelihood")
    # the retired experiments of issue 37 fail with the reason and where the code went
    for key in ("suppress_every_token", "completion_requests", "completion_neighbours"):
        with pytest.raises(HParamsError, match=f"'experimental.{key}' was retired: .*i37-all-token-experiments"):
            tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer", experimental={key: True})
    assert tiny_gd_target_hparams(tmp_path).target_objective == "neutral"  # the paper's default


def test_the_paper_keeps_its_target_cache_keys(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    assert "objective" not in target_settings(model, tiny_gd_target_hparams(tmp_path))
    assert (
        target_settings(model, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer"))["objective"]
        == "suppress_answer"
    )


def test_suppression_targets_push_the_answer_down(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    requests = _known_requests(model, tok)
    start = neutral_targets(
        model, tok, requests, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer", v_num_grad_steps=0)
    )
    supp = neutral_targets(model, tok, requests, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer"))
    eos = neutral_targets(model, tok, requests, tiny_gd_target_hparams(tmp_path))
    # -log(1 - p(answer)) fell for every request (on this tiny model the residual reaches its clamp first)
    assert torch.all(start.nll > 0.5), start.nll
    assert torch.all(supp.nll < 0.75 * start.nll), (start.nll, supp.nll)
    assert torch.equal(supp.h0, eos.h0)  # the same unedited state, another residual
    assert not torch.allclose(supp.z, eos.z)


def test_an_answer_already_suppressed_gets_no_residual(tok, tmp_path):
    """The early stop reads the suppression loss: p(answer) < 0.049 at step 0 -> residual 0, no step run."""
    model = sharp_tiny_llama(tok)
    requests = forget_requests()  # the tiny model gives these answers p < 0.01
    supp = neutral_targets(model, tok, requests, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer"))
    assert torch.all(supp.nll < 0.05), supp.nll
    assert supp.steps_run == [0, 0, 0] and torch.equal(supp.z, supp.h0)
    eos = neutral_targets(
        model, tok, requests, tiny_gd_target_hparams(tmp_path)
    )  # the paper's objective still moves them
    assert float((eos.z - eos.h0).norm()) > 0


def test_an_edit_with_suppression_targets_forgets(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer")
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    requests = _known_requests(model, tok)
    before = [_answer_prob(model, tok, r) for r in requests]
    assert min(before) > 0.2, before
    apply_zerounlearn_gd_to_model(model, tok, requests, hp, second_moments=moments, progress=False)
    after = [_answer_prob(model, tok, r) for r in requests]
    assert all(a < 0.5 * b for a, b in zip(after, before)), (before, after)


def test_a_request_without_an_answer_is_refused_and_the_model_unchanged(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    original = copy.deepcopy(model.state_dict())
    hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer")
    requests = forget_requests()
    del requests[1]["ground_truth"]
    with pytest.raises(ValueError, match=r"ground_truth.*\[1\]"):
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in original.items())


def test_a_missing_answer_is_refused_before_the_model_is_copied(tok, tmp_path, monkeypatch):
    import zerounlearn_editor.engine.pipeline as pipeline

    model = sharp_tiny_llama(tok)  # (built before deepcopy is patched: the builder copies too)

    def no_copy(_model):
        raise AssertionError("the model was copied before the requests were checked")

    monkeypatch.setattr(pipeline.copy_module, "deepcopy", no_copy)
    requests = forget_requests()
    del requests[0]["ground_truth"]
    hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer")
    with pytest.raises(ValueError, match=r"ground_truth.*\[0\]"):
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, copy=True, progress=False)


def test_one_prompt_with_two_answers_is_refused_not_dropped(tok, tmp_path):
    """Suppression pushes down a request's own answer: a repeat with another answer would be lost silently."""
    model = sharp_tiny_llama(tok)
    requests = forget_requests()
    requests.append(dict(requests[0], ground_truth="rome"))
    with pytest.raises(RequestError, match=r"request 3: same prompt and subject as request 0 but another ground_truth"):
        neutral_targets(model, tok, requests, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer"))
    same = forget_requests() + [dict(forget_requests()[0])]  # an exact repeat is still dropped
    assert neutral_targets(model, tok, same, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer",
                                                                    v_num_grad_steps=0)).z.shape[0] == 3
    # the paper's objective does not read the answer: the repeat is dropped as before
    assert neutral_targets(model, tok, requests, tiny_gd_target_hparams(tmp_path, v_num_grad_steps=0)).z.shape[0] == 3


def test_an_eos_answer_is_refused(tok, tmp_path):
    """EasyEdit fills in '<|endoftext|>' (here the tokenizer's EOS) when a request has no answer: not an answer."""
    model = sharp_tiny_llama(tok)
    requests = forget_requests()
    requests[2]["ground_truth"] = tok.eos_token
    with pytest.raises(ValueError, match=r"request\(s\) \[2\].*special"):
        neutral_targets(model, tok, requests, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer"))


@pytest.mark.parametrize("answers, stop", [("known", 0.02), ("staggered", 0.2)])
def test_cached_adam_gives_the_papers_adam_suppression_targets(tok, tmp_path, answers, stop):
    """``targets_optimizer: adam_kv`` runs the same suppression loss and Adam updates as ``adam`` (float rounding).
    "staggered": the first request stops at step 0 ("paris": p < 0.01 already), the others at different steps, one
    with a two-token answer that runs: the active requests' local indices differ from their global ones."""
    model = sharp_tiny_llama(tok)
    requests = _known_requests(model, tok)
    if answers == "staggered":
        known = requests[1]["ground_truth"]
        for request, answer in zip(requests, ["paris", known, known + " england"]):
            request["ground_truth"] = answer
    hp = tiny_gd_target_hparams(
        tmp_path, target_objective="suppress_answer", v_early_stop_loss=stop, targets_optimizer="adam"
    )
    paper = neutral_targets(model, tok, requests, hp)
    cached = neutral_targets(model, tok, requests, hp.replace(targets_optimizer="adam_kv"))
    if answers == "staggered":
        assert paper.steps_run[0] == 0 and paper.steps_run[2] > 0 and paper.steps_run[1] != paper.steps_run[2], (
            paper.steps_run
        )
    assert cached.steps_run == paper.steps_run
    torch.testing.assert_close(cached.nll, paper.nll, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(cached.z, paper.z, rtol=1e-3, atol=1e-4)
    assert float((paper.z - paper.h0).norm()) > 0
