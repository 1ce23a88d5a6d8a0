"""The diagnosis maths (issue 45 item 1): lens ranks among options, first/later token split, margins, quantization
step, the edit against the quantization error."""
from __future__ import annotations

import pytest
import torch

from tiny_models import tiny_llama, tiny_tokenizer
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.audit.diagnosis import (
    edit_against_quantization,
    first_and_rest,
    first_winning_layer,
    margin_split,
    relative_change,
    splice,
    winning_from,
)
from zerounlearn_editor.evaluation.audit.lens import lens_option_ranks, option_ranks
from zerounlearn_editor.evaluation.audit.quantize import quantize_rtn, rtn_step
from zerounlearn_editor.evaluation.batching import encode_probe
from zerounlearn_editor.evaluation.teacher_forcing import encode_answers, sequence_log_probs, token_log_probs


def test_option_ranks_count_rivals_at_least_as_high():
    logits = torch.tensor([[0.0, 5.0, 1.0, 3.0, 2.0],    # options (3, 1, 2): 3.0 vs 5.0, 1.0 -> one rival above
                           [0.0, 1.0, 1.0, 3.0, 2.0]])   # options (1, 2, 4): 1.0 vs 1.0 (tie), 2.0 -> two
    assert option_ranks(logits[0], torch.tensor([3, 1, 2])).item() == 1
    assert option_ranks(logits[1], torch.tensor([1, 2, 4])).item() == 2
    assert option_ranks(logits, torch.tensor([3, 2, 0])).tolist() == [0, 0]
    assert first_winning_layer([2, 1, 0, 1, 0]) == 2
    assert first_winning_layer([1, 3]) is None
    assert winning_from([0, 1, 0, 0]) == 2 and winning_from([0, 0]) == 0
    assert winning_from([0, 0, 1]) is None and winning_from([]) is None


def test_lens_option_ranks_at_the_last_layer_is_the_models_own_choice():
    tok = tiny_tokenizer()
    model = tiny_llama(tok).eval()
    prompts = ["the capital of france is", "many people live in"]
    options = [["paris", "rome", "london", "tokyo"], ["london", "paris", "berlin"]]
    ranks = lens_option_ranks(model, tok, prompts, options, "model.layers.{}", "model.norm", batch_size=1)
    assert ranks.shape == (2, model.config.num_hidden_layers)
    for prompt, opts, row in zip(prompts, options, ranks):
        ids = tok(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1]
        firsts = [encode_probe(tok, Probe(prompt, o)).answer_ids[0] for o in opts]
        expected = sum(1 for t in firsts[1:] if logits[t] >= logits[firsts[0]])
        assert int(row[-1]) == expected


def test_first_and_rest_split_the_scored_tokens():
    logp = torch.tensor([[9.0, -1.0, -2.0, -3.0],
                         [9.0, 9.0, -0.5, 9.0]])
    mask = torch.tensor([[False, True, True, True],
                         [False, False, True, False]])
    first, rest = first_and_rest(logp, mask)
    assert first.tolist() == [-1.0, -0.5]
    assert rest.tolist() == [-5.0, 0.0]
    with pytest.raises(ValueError, match="no scored token"):
        first_and_rest(logp, torch.zeros_like(mask))


def test_token_log_probs_sum_to_the_sequence_log_probs():
    tok = tiny_tokenizer()
    model = tiny_llama(tok).eval()
    batch = encode_answers(tok, [("the capital of france is", "paris is old"), ("many people live in", "london")])
    with torch.no_grad():
        per_token = token_log_probs(model, batch)
        total = sequence_log_probs(model, batch)
    assert per_token.shape == batch.target_mask.shape
    assert (per_token[~batch.target_mask] == 0).all() and (per_token[batch.target_mask] < 0).all()
    assert torch.allclose(per_token.sum(dim=1), total, atol=1e-5)


def test_margin_split_names_the_rival_and_what_carries_the_win():
    # totals -2.0, -2.5, -3.2: the true answer wins by 0.5 against option 1, whose first token is better
    split = margin_split(torch.tensor([-1.0, -0.5, -3.0]), torch.tensor([-1.0, -2.0, -0.2]))
    assert split["rival"] == 1 and split["wins"] and not split["first_wins"]
    assert split["margin"] == pytest.approx(0.5)
    assert split["first_margin"] == pytest.approx(-0.5) and split["rest_margin"] == pytest.approx(1.0)
    assert split["carried_by"] == "later"
    first_carried = margin_split(torch.tensor([-0.1, -2.0]), torch.tensor([-1.0, -0.5]))
    assert first_carried["wins"] and first_carried["carried_by"] == "first" and first_carried["first_wins"]
    lost = margin_split(torch.tensor([-3.0, -1.0, -2.0]), torch.tensor([0.0, 0.0, 0.0]))
    assert not lost["wins"] and lost["carried_by"] is None and lost["rival"] == 1
    assert lost["margin"] == pytest.approx(-2.0)


def test_rtn_step_is_the_groups_scale():
    w = torch.zeros(2, 32)
    w[0, 0], w[0, 20], w[1, 5] = 7.0, -14.0, 0.7
    step = rtn_step(w, 4, 16)
    assert step[0, :16].eq(1.0).all() and step[0, 16:].eq(2.0).all()
    assert torch.allclose(step[1, :16], torch.full((16,), 0.1))
    assert torch.allclose(rtn_step(w, 8)[0], torch.full((32,), 14.0 / 127))
    err = (quantize_rtn(w, 4, 16) - w).abs()
    assert (err <= step / 2 + 1e-6).all()


def test_edit_against_quantization_values():
    old = torch.zeros(1, 16)
    old[0, 0] = 7.0  # the group's step is 7 / 7 = 1 before and after the edit
    small, large = old.clone(), old.clone()
    small[0, 1] = 0.3  # below half a step: int4 rounds it back to 0
    large[0, 1] = 0.8  # above: int4 keeps 1.0
    keys = torch.zeros(16, 2)
    keys[1, 0] = 1.0
    keys[0, 1], keys[1, 1] = 1.0, 2.0
    s = edit_against_quantization(old, small, keys, 4, 16)
    assert s["frac_below_half_step"] == 1.0 and s["median_edit_over_step"] == pytest.approx(0.3)
    # effect of the edit 0.3 * k[1]; error of the quantization -0.3 * k[1]: equal norms
    assert s["median_effect_over_error"] == pytest.approx(1.0)
    assert s["median_edit_effect"] == pytest.approx((0.3 + 0.6) / 2)
    big = edit_against_quantization(old, large, keys, 4, 16)
    assert big["frac_below_half_step"] == 0.0 and big["median_edit_over_step"] == pytest.approx(0.8)
    assert big["median_quant_error"] == pytest.approx((0.2 + 0.4) / 2)
    assert big["median_effect_over_error"] == pytest.approx(4.0) and big["frac_keys_effect_below_error"] == 0.0
    with pytest.raises(ValueError, match="shapes"):
        edit_against_quantization(old, large, torch.zeros(8, 2))


def test_relative_change_and_splice():
    old = torch.tensor([[3.0, 4.0]])
    assert relative_change(torch.tensor([[3.0, 4.5]]), old) == pytest.approx(0.1)
    assert relative_change(old, old) == 0.0
    a, b = {"x": torch.zeros(1), "y": torch.zeros(1)}, {"x": torch.ones(1), "y": torch.ones(1)}
    mixed = splice(a, b, ["y"])
    assert mixed["x"].item() == 0.0 and mixed["y"].item() == 1.0
    with pytest.raises(KeyError, match="z"):
        splice(a, b, ["z"])
