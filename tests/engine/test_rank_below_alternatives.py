"""``rank_below_alternatives`` (opt-in): the forgotten answer's first token below its alternatives' logits."""
from __future__ import annotations

import logging

import pytest
import torch

from tiny_models import REPO_ROOT
from zerounlearn_editor import ZeroUnlearnGDHyperParams
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.engine.targets.ranking import (
    alternative_pools,
    pick_alternatives,
    rank_below_loss,
    requests_without_alternatives,
)

PAPER = REPO_ROOT / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct.yaml"


def test_loss_is_the_answer_logit_over_the_alternatives_mean_plus_margin():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 5.0], [4.0, 0.0, 0.0, 0.0]])
    answer = torch.tensor([0, 1, 0])
    alternatives = torch.tensor([[1, 2], [3, -1], [-1, -1]])  # -1: padding; the last entry has none
    loss = rank_below_loss(logits, answer, alternatives, margin=0.5)
    # 2 - mean(1, 0) + 0.5 = 2.0; 3 - 5 + 0.5 < 0 -> 0; no alternative -> 0
    assert torch.allclose(loss, torch.tensor([2.0, 0.0, 0.0]))


def test_the_gradient_lowers_the_answer_and_raises_the_alternatives():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]], requires_grad=True)
    rank_below_loss(logits, torch.tensor([0]), torch.tensor([[1, 2]]), margin=1.0).sum().backward()
    assert torch.allclose(logits.grad, torch.tensor([[1.0, -0.5, -0.5, 0.0]]))


def test_pick_alternatives_takes_the_k_most_likely_candidates_per_request():
    logits = torch.tensor([[0.0, 5.0, 1.0, 3.0], [0.0, 1.0, 5.0, 3.0], [9.0, 0.0, 0.0, 0.0]])
    picked = pick_alternatives(logits, torch.tensor([0, 0, 1]), [[1, 2, 3], [1]], k=2)
    # request 0: mean logits (0, 3, 3, 3) over its two rows: ties keep the candidates' order; request 1: one candidate
    assert picked.tolist() == [[1, 2], [1, -1]]


def _requests(answers):
    return normalize_requests([{"prompt": f"the capital of {s} is", "subject": s, "ground_truth": a}
                               for s, a in zip(("france", "germany", "japan", "spain"), answers)])


def test_pools_are_the_other_requests_first_tokens_and_a_lonely_request_has_none():
    from tiny_models import tiny_tokenizer

    tok = tiny_tokenizer()
    ids = {w: tok(" " + w, add_special_tokens=False)["input_ids"][0] for w in ("paris", "berlin", "tokyo")}
    pools = alternative_pools(tok, _requests(["paris", "berlin", "tokyo", "paris"]))
    assert pools == [[ids["berlin"], ids["tokyo"]], [ids["paris"], ids["tokyo"]], [ids["paris"], ids["berlin"]],
                     [ids["berlin"], ids["tokyo"]]]
    lonely = _requests(["paris", "paris"])
    assert alternative_pools(tok, lonely) == [[], []]
    assert requests_without_alternatives(lonely, alternative_pools(tok, lonely)) == [0, 1]
    assert requests_without_alternatives(_requests(["paris", "berlin"]), [[1], [2]]) == []
    no_answer = normalize_requests([{"prompt": "the capital of france is", "subject": "france"}])
    with pytest.raises(ValueError, match=r"rank_below_alternatives needs each request's 'ground_truth'"):
        alternative_pools(tok, no_answer)


@pytest.mark.parametrize("value, field", [
    ({"weight": 0.0, "margin": 1.0, "k": 3}, "weight"),
    ({"weight": float("inf"), "margin": 1.0, "k": 3}, "weight"),
    ({"weight": True, "margin": 1.0, "k": 3}, "weight"),
    ({"weight": 1.0, "margin": -0.5, "k": 3}, "margin"),
    ({"weight": 1.0, "margin": "1", "k": 3}, "margin"),
    ({"weight": 1.0, "margin": 1.0, "k": 0}, "k"),
    ({"weight": 1.0, "margin": 1.0, "k": 2.5}, "k"),
])
def test_bad_values_are_refused_naming_the_field(value, field):
    import yaml

    config = yaml.safe_load(PAPER.read_text())
    config["rank_below_alternatives"] = value
    with pytest.raises(HParamsError, match=rf"x\.yaml: field 'rank_below_alternatives\.{field}'"):
        ZeroUnlearnGDHyperParams.from_dict(config, source="x.yaml")


@pytest.mark.parametrize("value", [1.0, {"weight": 1.0, "margin": 1.0}, {"weight": 1, "margin": 1, "k": 2, "x": 1}])
def test_a_setting_that_is_not_the_three_fields_is_refused(value):
    import yaml

    config = yaml.safe_load(PAPER.read_text())
    config["rank_below_alternatives"] = value
    with pytest.raises(HParamsError, match=r"x\.yaml: key 'rank_below_alternatives' must be a mapping "
                                           r"with exactly the fields \['weight', 'margin', 'k'\]"):
        ZeroUnlearnGDHyperParams.from_dict(config, source="x.yaml")


def test_the_option_changes_the_targets_and_ranks_the_answer_below_the_others(tmp_path, caplog):
    """On a tiny model: the targets (and their cache key) change with the option and move each answer's first token
    that the paper's targets leave less than ``margin`` below its alternatives at the bare prompt down towards that;
    a request already below keeps the paper's target; a request alone in its edit has no alternatives and keeps the
    paper's target, with a warning before any work."""
    from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
    from zerounlearn_editor.engine.pipeline import check_edit_inputs, neutral_targets, target_settings
    from zerounlearn_editor.support.model_access import get_module

    tok = tiny_tokenizer()
    model = sharp_tiny_llama(tok)
    setting = {"weight": 1.0, "margin": 2.0, "k": 2}
    paper = tiny_gd_target_hparams(tmp_path, v_num_grad_steps=40)
    lever = tiny_gd_target_hparams(tmp_path, v_num_grad_steps=40, rank_below_alternatives=setting)
    assert "rank_weight" not in target_settings(model, paper)
    assert target_settings(model, lever)["rank_weight"] == 1.0 and target_settings(model, lever)["rank_k"] == 2
    requests = forget_requests()
    z_paper, z_lever = neutral_targets(model, tok, requests, paper).z, neutral_targets(model, tok, requests, lever).z
    assert not torch.allclose(z_paper, z_lever)
    assert torch.equal(z_paper, neutral_targets(model, tok, requests, paper).z)

    first = [tok(" " + r["ground_truth"], add_special_tokens=False)["input_ids"][0] for r in requests]

    def gaps(z):
        """Per request: the answer's logit minus the mean of the other two answers' at the bare prompt, with the
        last edited layer's output at the subject's last token replaced by ``z``."""
        out = []
        for i, request in enumerate(requests):
            ids = tok(request["prompt"], return_tensors="pt")["input_ids"]
            through_subject = request["prompt"].split(request["subject"])[0] + request["subject"]
            subject_last = len(tok(through_subject)["input_ids"]) - 1

            def put(_m, _a, output, i=i, at=subject_last):
                hidden = output[0] if isinstance(output, tuple) else output
                hidden = hidden.clone()
                hidden[0, at] = z[i]
                return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

            handle = get_module(model, paper.layer_module_tmp.format(paper.layers[-1])).register_forward_hook(put)
            try:
                with torch.no_grad():
                    logits = model(input_ids=ids).logits[0, -1]
            finally:
                handle.remove()
            others = [t for j, t in enumerate(first) if j != i]
            out.append(float(logits[first[i]] - logits[others].mean()))
        return out

    paper_gaps, lever_gaps = gaps(z_paper), gaps(z_lever)
    # requests 0 and 1: the paper's targets leave the answer less than the margin below the others, the lever's
    # lower it (request 1 to the margin); request 2 is already below them: the term is 0 and its target the paper's
    assert paper_gaps[0] > -2.0 and lever_gaps[0] < paper_gaps[0] - 0.5
    assert paper_gaps[1] > -2.0 >= lever_gaps[1] - 0.05
    assert paper_gaps[2] < -2.0 and torch.allclose(z_lever[2], z_paper[2], atol=1e-5)
    alone = neutral_targets(model, tok, requests[:1], lever).z
    assert torch.allclose(alone, neutral_targets(model, tok, requests[:1], paper).z, atol=1e-6)
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.pipeline"):
        check_edit_inputs(model, tok, requests[:1], lever)
    assert "rank_below_alternatives: request(s) [0] have no other request" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.pipeline"):
        check_edit_inputs(model, tok, requests, lever)
    assert "rank_below_alternatives" not in caplog.text
