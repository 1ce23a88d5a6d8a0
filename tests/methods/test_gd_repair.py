"""ZeroUnlearn-GD's repair rounds (``repair_rounds: R``, opt-in; graduated from ``experimental:``): the requests
whose answer's first token is still the argmax after the edit are edited again, alone, on the edited model. 0 (the
default) is the paper's one edit, bit for bit."""
from __future__ import annotations

from typing import List

import pytest
import torch

from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor import apply_zerounlearn_gd_to_model
from zerounlearn_editor.engine.fluency_guard import FluencyError
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import (
    EditReport,
    as_edit_plan,
    batched_statistics,
    neutral_targets,
    still_answered,
)
from zerounlearn_editor.methods.zerounlearn_gd import repair
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
    extra = {} if rounds is None else {"repair_rounds": rounds}
    return tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer", suppress_rank_limit=0,
                                  orthogonality_weight=0.0, **extra, **changes)


def _weights(model, hp):
    return {l: get_module(model, hp.rewrite_module_tmp.format(l)).weight.detach().clone() for l in hp.layers}


def _assert_weights(model, hp, weights) -> None:
    for layer, weight in weights.items():
        assert torch.equal(get_module(model, hp.rewrite_module_tmp.format(layer)).weight, weight), layer


def _one_round_of_request_0(tok, tmp_path, monkeypatch, **changes):
    """``(model, hparams, requests, unedited weights)`` for one repair round, whose check finds request 0 left."""
    model = sharp_tiny_llama(tok)
    hp = _hp(tmp_path, rounds=1, **changes)
    requests = _answers_at_ranks(model, tok, [0, 0, 0])
    monkeypatch.setattr(repair, "first_token_kept", lambda model, tok, forget, reading=None: [0])
    return model, hp, requests, _weights(model, hp)


@pytest.mark.parametrize("value", [-1, True, 1.5, "2", None])
def test_the_key_must_be_an_integer_at_least_zero(tmp_path, value):
    with pytest.raises(HParamsError, match=r"key 'repair_rounds' (must be an integer >= 0|has value)"):
        tiny_gd_target_hparams(tmp_path, repair_rounds=value)


def test_the_key_defaults_to_zero_and_its_experimental_form_is_refused_naming_the_move(tmp_path):
    assert tiny_gd_target_hparams(tmp_path).repair_rounds == 0 and _hp(tmp_path, rounds=2).repair_rounds == 2
    with pytest.raises(HParamsError, match="graduated to the top-level key 'repair_rounds'"):
        tiny_gd_target_hparams(tmp_path, experimental={"repair_rounds": 1})


def test_first_token_kept_reads_the_answers_first_token_only(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    requests = _answers_at_ranks(model, tok, [0, 2, 0])
    plan = as_edit_plan(model, tok, requests, tiny_gd_target_hparams(tmp_path))
    assert repair.first_token_kept(model, tok, plan.forget) == [0, 2]
    requests[2]["ground_truth"] = requests[2]["ground_truth"] + " " + requests[1]["ground_truth"]  # a longer answer
    plan = as_edit_plan(model, tok, requests, tiny_gd_target_hparams(tmp_path))
    assert repair.first_token_kept(model, tok, plan.forget) == [0, 2]  # its first token still starts it


def test_rounds_that_find_nothing_left_leave_the_one_edit_bit_for_bit(tok, tmp_path, monkeypatch):
    """With nothing left to repair the rounds only read: the weights are the one edit's (the shipped YAMLs without
    the key are pinned by tests/methods/test_yaml_pins.py)."""
    model = sharp_tiny_llama(tok)
    requests = _answers_at_ranks(model, tok, [0, 0, 0])
    plain, _ = apply_zerounlearn_gd_to_model(model, tok, requests, _hp(tmp_path), copy=True, progress=False)
    monkeypatch.setattr(repair, "first_token_kept", lambda model, tok, forget, reading=None: [])
    idle, _ = apply_zerounlearn_gd_to_model(model, tok, requests, _hp(tmp_path, rounds=2), copy=True, progress=False)
    for layer, weight in _weights(plain, _hp(tmp_path)).items():
        assert torch.equal(weight, _weights(idle, _hp(tmp_path))[layer])


def test_each_round_edits_the_requests_still_started_and_the_unedited_weights_come_back(tok, tmp_path, monkeypatch):
    """Called as the bench calls it (cached targets, statistics, the guard's mode): each round gets the statistics
    and the guard's mode but reads its own targets; the weights returned are the unedited ones."""
    model = sharp_tiny_llama(tok)
    hp = _hp(tmp_path, rounds=3)
    requests = _answers_at_ranks(model, tok, [0, 0, 0])
    before = _weights(model, hp)
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    targets = neutral_targets(model, tok, requests, hp)
    kept_by_call = iter([[1, 2], [2], []])  # rounds 1-2 find facts left, round 3 none: it stops there
    monkeypatch.setattr(repair, "first_token_kept", lambda model, tok, forget, reading=None: next(kept_by_call))
    edited: List[List[int]] = []
    real_edit = repair.run_layerwise_edit

    def recording_edit(model, tok, plan, *args, **kwargs):
        edited.append([r.index for r in plan.forget])
        assert "targets" not in kwargs and kwargs["second_moments"] is moments and kwargs["fluency_guard"] == "warn"
        return real_edit(model, tok, plan, *args, **kwargs)

    monkeypatch.setattr(repair, "run_layerwise_edit", recording_edit)
    report = EditReport()
    model, original = apply_zerounlearn_gd_to_model(model, tok, requests, hp, return_orig_weights=True,
                                                    progress=False, report=report, targets=targets,
                                                    second_moments=moments, fluency_guard="warn")
    assert edited == [[1, 2], [2]]
    assert report.timings["repair"] > 0 and "repair" in [span[0] for span in report.stage_spans]
    # the greedy check is of the model the rounds left (the first edit's own check is skipped)
    assert report.still_answered == still_answered(model, tok, as_edit_plan(model, tok, requests, hp).forget)
    # the guard's verdict is on the total: the unedited model's perplexity against the last round's
    assert report.fluency["ppl_before"] == pytest.approx(report.fluency["ppl_after"] / (1 + report.fluency["increase"]))
    for layer, weight in before.items():
        name = f"{hp.rewrite_module_tmp.format(layer)}.weight"
        assert torch.equal(original[name], weight)  # the unedited weights, not round 1's
        assert not torch.equal(get_module(model, hp.rewrite_module_tmp.format(layer)).weight, weight)


def test_a_copy_is_edited_and_the_callers_model_is_left(tok, tmp_path, monkeypatch):
    model, hp, requests, before = _one_round_of_request_0(tok, tmp_path, monkeypatch)
    edited, weights = apply_zerounlearn_gd_to_model(model, tok, requests, hp, copy=True, progress=False)
    assert edited is not model and weights == {}
    _assert_weights(model, hp, before)
    for layer, weight in before.items():
        assert not torch.equal(get_module(edited, hp.rewrite_module_tmp.format(layer)).weight, weight)


def test_the_guard_refuses_on_the_total_and_the_unedited_weights_come_back(tok, tmp_path, monkeypatch):
    """A round whose own change passes but whose total over the unedited model does not is refused like an edit."""
    model, hp, requests, before = _one_round_of_request_0(tok, tmp_path, monkeypatch, fluency_max_increase=0.5)
    real_edit = repair.run_layerwise_edit

    def costly_round(*args, **kwargs):
        weights, round_report = real_edit(*args, **kwargs)
        round_report.fluency["ppl_after"] = 1e3 * round_report.fluency["ppl_after"]  # far over the limit in total
        return weights, round_report

    monkeypatch.setattr(repair, "run_layerwise_edit", costly_round)
    with pytest.raises(FluencyError, match="edit refused and the weights restored"):
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False)
    _assert_weights(model, hp, before)


def test_rounds_refuse_the_keys_that_draw_from_the_whole_request_set(tmp_path):
    with pytest.raises(HParamsError, match="'repair_rounds' cannot be combined with 'fewshot_contexts'"):
        _hp(tmp_path, rounds=1, fewshot_contexts=2)
    with pytest.raises(HParamsError, match="'rank_below_alternatives'"):
        _hp(tmp_path, rounds=1, rank_below_alternatives={"weight": 1.0, "margin": 8.0, "k": 3})
    assert _hp(tmp_path, rounds=0, fewshot_contexts=2).fewshot_contexts == 2


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
    model, hp, requests, before = _one_round_of_request_0(tok, tmp_path, monkeypatch)

    def failing_edit(*args, **kwargs):
        raise RuntimeError("round failed")

    monkeypatch.setattr(repair, "run_layerwise_edit", failing_edit)
    with pytest.raises(RuntimeError, match="round failed"):
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False)
    _assert_weights(model, hp, before)
