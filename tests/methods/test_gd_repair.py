"""ZeroUnlearn-GD's repair rounds (``experimental: {repair_rounds: R}``, opt-in): the requests whose answer's first
token is still the argmax after the edit are edited again, alone, on the edited model. Absent or 0 is the paper's
one edit, bit for bit."""
from __future__ import annotations

from typing import List

import pytest
import torch

from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor import apply_zerounlearn_gd_to_model
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import EditReport, as_edit_plan, still_answered
from zerounlearn_editor.methods.zerounlearn_gd import repair
from zerounlearn_editor.methods.zerounlearn_gd.config import REPAIR_ROUNDS, repair_rounds_of
from zerounlearn_editor.support.model_access import get_module


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _answers_at_ranks(model, tok, ranks: List[int]) -> List[dict]:
    """The tiny forget requests, request ``i``'s answer the ``ranks[i]``-th non-special token after its prompt."""
    special = set(tok.all_special_ids)
    requests = forget_requests()
    for request, wanted in zip(requests, ranks):
        with torch.no_grad():
            logits = model(tok(request["prompt"], return_tensors="pt").input_ids).logits[0, -1]
        order = [int(i) for i in torch.argsort(logits, descending=True) if int(i) not in special]
        request["ground_truth"] = tok.convert_ids_to_tokens(order[wanted])
    return requests


def _hp(tmp_path, rounds=None, **changes):
    extra = {} if rounds is None else {"experimental": {REPAIR_ROUNDS: rounds}}
    return tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer", suppress_rank_limit=0,
                                  orthogonality_weight=0.0, **extra, **changes)


def _weights(model, hp):
    return {l: get_module(model, hp.rewrite_module_tmp.format(l)).weight.detach().clone() for l in hp.layers}


@pytest.mark.parametrize("value", [-1, True, 1.5, "2", None])
def test_the_key_must_be_an_integer_at_least_zero(tmp_path, value):
    with pytest.raises(HParamsError, match=r"experimental\.repair_rounds.*integer >= 0"):
        tiny_gd_target_hparams(tmp_path, experimental={REPAIR_ROUNDS: value})


def test_the_key_reads_zero_when_absent_and_other_experiments_stay_refused(tmp_path):
    assert repair_rounds_of({}) == 0 and repair_rounds_of({REPAIR_ROUNDS: 3}) == 3
    assert _hp(tmp_path, rounds=2).experimental == {REPAIR_ROUNDS: 2}
    with pytest.raises(HParamsError, match="unknown key"):
        tiny_gd_target_hparams(tmp_path, experimental={"repair_round": 1})


def test_first_token_kept_reads_the_answers_first_token_only(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    requests = _answers_at_ranks(model, tok, [0, 2, 0])
    plan = as_edit_plan(model, tok, requests, tiny_gd_target_hparams(tmp_path))
    assert repair.first_token_kept(model, tok, plan.forget) == [0, 2]
    requests[2]["ground_truth"] = requests[2]["ground_truth"] + " " + requests[1]["ground_truth"]  # a longer answer
    plan = as_edit_plan(model, tok, requests, tiny_gd_target_hparams(tmp_path))
    assert repair.first_token_kept(model, tok, plan.forget) == [0, 2]  # its first token still starts it


def test_zero_rounds_is_the_one_edit_bit_for_bit(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    requests = _answers_at_ranks(model, tok, [0, 0, 0])
    plain, _ = apply_zerounlearn_gd_to_model(model, tok, requests, _hp(tmp_path), copy=True, progress=False)
    zero, _ = apply_zerounlearn_gd_to_model(model, tok, requests, _hp(tmp_path, rounds=0), copy=True, progress=False)
    for layer, weight in _weights(plain, _hp(tmp_path)).items():
        assert torch.equal(weight, _weights(zero, _hp(tmp_path))[layer])


def test_each_round_edits_the_requests_still_started_and_the_unedited_weights_come_back(tok, tmp_path, monkeypatch):
    model = sharp_tiny_llama(tok)
    hp = _hp(tmp_path, rounds=3)
    requests = _answers_at_ranks(model, tok, [0, 0, 0])
    before = _weights(model, hp)
    kept_by_call = iter([[1, 2], [2], []])  # rounds 1-2 find facts left, round 3 none: it stops there
    monkeypatch.setattr(repair, "first_token_kept", lambda model, tok, forget: next(kept_by_call))
    edited: List[List[int]] = []
    real_edit = repair.run_layerwise_edit

    def recording_edit(model, tok, plan, *args, **kwargs):
        edited.append([r.index for r in plan.forget])
        assert "targets" not in kwargs  # each round reads its own targets on the edited model
        return real_edit(model, tok, plan, *args, **kwargs)

    monkeypatch.setattr(repair, "run_layerwise_edit", recording_edit)
    report = EditReport()
    model, original = apply_zerounlearn_gd_to_model(model, tok, requests, hp, return_orig_weights=True,
                                                    progress=False, report=report)
    assert edited == [[1, 2], [2]]
    assert report.timings["repair"] > 0
    # the greedy check is of the model the rounds left (the first edit's own check is skipped)
    assert report.still_answered == still_answered(model, tok, as_edit_plan(model, tok, requests, hp).forget)
    for layer, weight in before.items():
        name = f"{hp.rewrite_module_tmp.format(layer)}.weight"
        assert torch.equal(original[name], weight)  # the unedited weights, not round 1's
        assert not torch.equal(get_module(model, hp.rewrite_module_tmp.format(layer)).weight, weight)


def test_repair_leaves_no_more_first_tokens_than_the_one_edit(tok, tmp_path):
    """A weak edit (one target step) leaves answers started; repair rounds, each on the model the last one left,
    edit those again and leave at most as many."""
    model = sharp_tiny_llama(tok)
    requests = _answers_at_ranks(model, tok, [0, 0, 0])
    weak = dict(v_num_grad_steps=1, v_lr=0.05)
    one, _ = apply_zerounlearn_gd_to_model(model, tok, requests, _hp(tmp_path, **weak), copy=True, progress=False)
    plan = as_edit_plan(model, tok, requests, _hp(tmp_path, **weak))
    left_one = repair.first_token_kept(one, tok, plan.forget)
    assert left_one, "the weak edit should leave an answer started (else the test says nothing)"
    repaired, _ = apply_zerounlearn_gd_to_model(model, tok, requests, _hp(tmp_path, rounds=4, **weak), copy=True,
                                                progress=False)
    left_repaired = repair.first_token_kept(repaired, tok, plan.forget)
    assert len(left_repaired) < len(left_one), (left_one, left_repaired)


def test_a_failed_round_puts_the_unedited_weights_back(tok, tmp_path, monkeypatch):
    model = sharp_tiny_llama(tok)
    hp = _hp(tmp_path, rounds=1)
    requests = _answers_at_ranks(model, tok, [0, 0, 0])
    before = _weights(model, hp)
    monkeypatch.setattr(repair, "first_token_kept", lambda model, tok, forget: [0])

    def failing_edit(*args, **kwargs):
        raise RuntimeError("round failed")

    monkeypatch.setattr(repair, "run_layerwise_edit", failing_edit)
    with pytest.raises(RuntimeError, match="round failed"):
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False)
    for layer, weight in before.items():
        assert torch.equal(get_module(model, hp.rewrite_module_tmp.format(layer)).weight, weight)
