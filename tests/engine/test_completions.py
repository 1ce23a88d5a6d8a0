"""Completion requests (experimental ``completion_requests``): which answer positions are added, the requests they
become, and an edit that uses them (tiny models; the SmolLM2 figures are in benchmarks/RESULTS.md, "Scale")."""
from __future__ import annotations

import pytest
import torch

from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor.engine.completions import completion_neighbours, completion_sites, expand_with_completions
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import (
    EditReport,
    EditStages,
    batched_statistics,
    neutral_targets,
    request_target_ids,
    target_settings,
)
from zerounlearn_editor.engine.requests import ForgetRequest, normalize_requests
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_sites_are_the_completed_positions_of_known_answers():
    answers = [[5, 6, 7], [5, 6, 7], [5, 6], [9], [1, 2, 3, 4]]
    predicted = [
        [5, 6, 7],  # known, both later tokens completed: sites after 1 and 2 tokens
        [0, 6, 0],  # accuracy 1/3 < 0.5: not known, no site though token 2 is completed
        [5, 0],  # known (1/2), second token not completed: no site
        [9],  # one token: nothing to complete
        [0, 2, 0, 4],  # known (2/4): sites after 1 and 3 tokens
    ]
    sites = completion_sites(answers, predicted, 0.5)
    assert [(s.request, s.length, s.prefix_ids, s.rest_ids) for s in sites] == [
        (0, 1, (5,), (6, 7)), (0, 2, (5, 6), (7,)), (4, 1, (1,), (2, 3, 4)), (4, 3, (1, 2, 3), (4,))]
    assert [s.request for s in completion_sites(answers, predicted, 0.75)] == [0, 0]
    with pytest.raises(ValueError, match="request 1: 2 answer tokens but 3 predictions"):
        completion_sites([[1], [1, 2]], [[1], [1, 2, 3]], 0.5)


def _top_word(model, tok, text: str, rank: int = 0) -> str:
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits[0, -1].float()
    logits[list(tok.all_special_ids)] = -float("inf")
    return tok.convert_ids_to_tokens(int(logits.topk(rank + 1).indices[rank]))


def _requests(model, tok):
    """Two requests whose two-word answer the model gives word by word (known, the second word completed) and one
    whose words it ranks second each time (not known)."""
    requests = forget_requests()
    for i, request in enumerate(requests):
        rank = 0 if i < 2 else 1
        first = _top_word(model, tok, request["prompt"], rank)
        request["ground_truth"] = first + " " + _top_word(model, tok, request["prompt"] + " " + first, rank)
    return requests


def _expanded(model, tok, requests, tmp_path):
    hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer",
                                experimental={"completion_requests": True})
    forget = normalize_requests(requests)
    return forget, expand_with_completions(model, tok, forget, request_target_ids(tok, forget, hp), 0.5)


def test_a_known_answer_gets_one_request_at_its_completed_token(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    requests = _requests(model, tok)
    forget, (expanded, ids) = _expanded(model, tok, requests, tmp_path)
    assert len(expanded) == 5  # request 0, its completion, request 1, its completion, request 2
    for place, source in ((0, 0), (2, 1), (4, 2)):
        assert expanded[place] is forget[source]
    for place, source in ((1, 0), (3, 1)):
        first, second = requests[source]["ground_truth"].split()
        added = expanded[place]
        assert added.index == forget[source].index and added.answer is None
        assert tok(added.prompt)["input_ids"] == tok(requests[source]["prompt"] + " " + first)["input_ids"]
        assert added.subject.strip() == first and added.prefix == requests[source]["prompt"]
        assert ids[place] == tok(" " + second, add_special_tokens=False)["input_ids"]
    # request-major: a list expands to the concatenation of its parts' expansions (targets are cached by chunk)
    head = _expanded(model, tok, requests[:1], tmp_path)[1]
    tail = _expanded(model, tok, requests[1:], tmp_path)[1]
    assert [r.prompt for r in head[0] + tail[0]] == [r.prompt for r in expanded]
    assert head[1] + tail[1] == ids


def test_completion_targets_move_the_completed_token_state(tok, tmp_path):
    """The completion request's target is the residual at the answer's first word that makes the second unlikely."""
    model = sharp_tiny_llama(tok)
    requests = _requests(model, tok)
    hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer",
                                experimental={"completion_requests": True})
    targets = neutral_targets(model, tok, requests, hp)
    plain = neutral_targets(model, tok, requests, tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer"))
    assert targets.z.shape[0] == 5 and plain.z.shape[0] == 3
    # the whole-answer requests: the same targets (up to the float rounding of another batch shape)
    assert torch.allclose(targets.z[[0, 2, 4]], plain.z, atol=1e-3)
    assert all(float((targets.z[i] - targets.h0[i]).norm()) > 0 for i in (1, 3))
    assert target_settings(model, hp)["completion_requests"] is True
    assert "completion_requests" not in target_settings(model, tiny_gd_target_hparams(tmp_path))


def _second_word_prob(model, tok, request) -> float:
    first, second = request["ground_truth"].split()
    ids = tok(request["prompt"] + " " + first, return_tensors="pt").input_ids
    with torch.no_grad():
        probs = torch.softmax(model(ids).logits[0, -1].float(), -1)
    return float(probs[tok.convert_tokens_to_ids(second)])


def test_an_edit_with_completion_requests_takes_the_completion_away(tok, tmp_path):
    """The same edit with and without the key: the keys stage reads the completion requests too, the second word's
    probability after the first falls further with them, and the report speaks of the caller's requests only."""
    results = {}
    for key in (False, True):
        model = sharp_tiny_llama(tok)
        requests = _requests(model, tok)
        hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer",
                                    experimental={"completion_requests": key})
        moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
        read = []

        def spy(model_, tok_, forget, *args, **kwargs):
            read.append(len(forget))
            return read_keys_and_hidden(model_, tok_, forget, *args, **kwargs)

        before = [_second_word_prob(model, tok, r) for r in requests[:2]]
        report = EditReport()
        apply_zerounlearn_gd_to_model(model, tok, requests, hp, second_moments=moments, progress=False,
                                      stages=EditStages(keys=spy), report=report)
        results[key] = (before, [_second_word_prob(model, tok, r) for r in requests[:2]], read, report)
    (before, plain, read_plain, _), (_, added, read_added, report) = results[False], results[True]
    assert set(read_plain) == {3} and set(read_added) == {5}
    assert min(before) > 0.2, before
    assert all(a < 0.5 * p for a, p in zip(added, plain)), (before, plain, added)
    assert "completions" in report.timings
    assert set(report.still_answered) <= {0, 1, 2}


def test_hparams_refuse_a_bad_value_or_another_objective(tmp_path):
    for bad in (1, "known", None):
        with pytest.raises(HParamsError, match="experimental.completion_requests.*true or false"):
            tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer",
                                   experimental={"completion_requests": bad})
    with pytest.raises(HParamsError, match="completion_requests.*needs target_objective 'suppress_answer'"):
        tiny_gd_target_hparams(tmp_path, experimental={"completion_requests": True})


def test_neighbour_rows_put_each_answer_prefix_after_another_subject_and_at_a_text_start():
    forget = [
        ForgetRequest(0, "The ", "Corolla", " is made by", "Toyota", None),
        ForgetRequest(1, "The ", "Prius", " is made by", "Toyota", None),  # same answer: not a neighbour of 0
        ForgetRequest(2, "The ", "Civic", " is made by", "Honda", None),
    ]
    expanded = [forget[0], ForgetRequest(0, forget[0].prompt, " Toy", "", None, None), forget[1], forget[2],
                ForgetRequest(2, forget[2].prompt, " Hon", "", None, None)]
    keep = completion_neighbours(forget, expanded)
    assert [(k.index, k.prompt, k.subject) for k in keep] == [
        (0, "The Civic is made by Toy", " Toy"),  # the next request with another subject and answer
        (0, "Toy", "Toy"),
        (2, "The Corolla is made by Hon", " Hon"),  # cyclically
        (2, "Hon", "Hon"),
    ]
    assert all(k.answer is None and k.suffix == "" for k in keep)
    assert completion_neighbours(forget, forget) == []


def test_neighbour_rows_need_completion_requests_and_a_retain_weight(tmp_path):
    with pytest.raises(HParamsError, match="completion_neighbours' needs 'experimental.completion_requests: true'"):
        tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer", retain_nullspace_weight=1.0,
                               experimental={"completion_neighbours": True})
    with pytest.raises(HParamsError, match="completion_neighbours' needs .*retain weight > 0"):
        tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer",
                               experimental={"completion_requests": True, "completion_neighbours": True})
    hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer", retain_nullspace_weight=1.0,
                                experimental={"completion_requests": True, "completion_neighbours": True})
    assert hp.experimental["completion_neighbours"] is True


def test_an_edit_reads_the_neighbour_rows_as_retain_keys(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    requests = _requests(model, tok)
    hp = tiny_gd_target_hparams(tmp_path, target_objective="suppress_answer", retain_nullspace_weight=1.0,
                                experimental={"completion_requests": True, "completion_neighbours": True})
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    read = []

    def spy(model_, tok_, rows, *args, **kwargs):
        read.append([r.prompt for r in rows])
        return read_keys_and_hidden(model_, tok_, rows, *args, **kwargs)

    apply_zerounlearn_gd_to_model(model, tok, requests, hp, second_moments=moments, progress=False,
                                  stages=EditStages(keys=spy))
    first = requests[0]["ground_truth"].split()[0]
    other = next(r for r in requests[1:] if r["ground_truth"] != requests[0]["ground_truth"])
    swapped = requests[0]["prompt"].replace("france", other["subject"]) + " " + first
    assert all(len(rows) == 9 for rows in read)  # 3 requests + 2 completion requests, then 4 neighbour rows
    assert tok(read[0][5])["input_ids"] == tok(swapped)["input_ids"]
    assert read[0][6].strip() == first
