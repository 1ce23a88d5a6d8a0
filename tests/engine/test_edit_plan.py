"""The edit's checks run once per edit: :func:`check_edit_inputs` gives an :class:`EditPlan` the edit takes as
is."""
from __future__ import annotations

import pytest
import torch

from tiny_models import forget_requests, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model
from zerounlearn_editor.engine import pipeline
from zerounlearn_editor.engine.pipeline import EditPlan, batched_statistics, check_edit_inputs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan")
    tok = tiny_tokenizer()
    hp = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp / "stats", write_corpus(tmp / "c.jsonl"),
                                                              alg_name="ZeroUnlearn-GD", v_num_grad_steps=3))
    model = tiny_llama(tok)
    return model, tok, hp, batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)


def test_the_edit_checks_its_requests_once_and_takes_a_plan_as_it_is(setup, monkeypatch):
    model, tok, hp, moments = setup
    calls = []
    original = pipeline.normalize_requests
    monkeypatch.setattr(pipeline, "normalize_requests", lambda *a, **k: calls.append(1) or original(*a, **k))
    plan = check_edit_inputs(model, tok, forget_requests(), hp)
    assert isinstance(plan, EditPlan) and [r.index for r in plan.forget] == [0, 1, 2] and plan.keep == []
    assert len(plan.target_ids) == 3 and plan.hparams is hp
    assert check_edit_inputs(model, tok, plan, hp) is plan
    edited, _ = apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, copy=True,
                                              second_moments=moments, progress=False)
    assert len(calls) == 2  # once for the plan above, once for the edit (not once per entry point)
    from_plan, _ = apply_zerounlearn_gd_to_model(model, tok, plan, hp, copy=True, second_moments=moments,
                                                 progress=False)
    assert len(calls) == 2
    weight = "model.layers.2.mlp.down_proj.weight"
    assert torch.equal(dict(edited.named_parameters())[weight], dict(from_plan.named_parameters())[weight])


def test_a_plan_checked_against_other_hparams_is_refused(setup):
    model, tok, hp, _ = setup
    plan = check_edit_inputs(model, tok, forget_requests(), hp)
    with pytest.raises(ValueError, match="checked against other hparams"):
        check_edit_inputs(model, tok, plan, hp.replace(v_lr=0.25))


def test_a_plan_given_with_another_retain_set_is_refused(setup):
    model, tok, hp, _ = setup
    plan = check_edit_inputs(model, tok, forget_requests(), hp)
    other = [{"prompt": "The color of the sky is", "subject": "sky", "target_new": "blue"}]
    with pytest.raises(ValueError, match="another retain set"):
        check_edit_inputs(model, tok, plan, hp, other)
    assert check_edit_inputs(model, tok, plan, hp, None) is plan  # no retain argument: the plan's own
