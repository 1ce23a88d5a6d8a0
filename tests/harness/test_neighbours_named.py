"""Neighbour prompts that name a forgotten subject: the marks and the ``spe_distinct`` column."""
from __future__ import annotations

import pytest

from zerounlearn_editor.data import Probe, UnlearnCase
from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.harness.case_scoring import probe_metrics
from zerounlearn_editor.harness.neighbours import names_subject, neighbours_naming_forgotten_subjects


def _case(case_id: str, subject: str, prompt: str, neighbours):
    return UnlearnCase(case_id, {"prompt": prompt, "subject": subject, "ground_truth": "x", "target_new": ""},
                       forget=[Probe(prompt, "x")], paraphrase=[], neighbour=[Probe(p, "y") for p in neighbours],
                       source="test")


def test_names_subject_whole_words_case_insensitive():
    assert names_subject("Nintendo DS Lite, created by", "Nintendo DS")
    assert names_subject("the NINTENDO ds lite is", "Nintendo DS")
    assert not names_subject("Rabat is the capital of", "Ra")
    assert not names_subject("Nintendo DSi, created by", "Nintendo DS")
    assert not names_subject("anything", "  ")
    assert names_subject("C++ was designed by", "C++") and names_subject("Mr.X is", "Mr.")
    assert not names_subject("Cfoo is", "C++")
    assert names_subject("Nintendo  DS Lite", "Nintendo DS") and names_subject("Nintendo\u00a0DS Lite", "Nintendo DS")
    assert names_subject("Cafe\u0301 Society is", "Caf\u00e9 Society")  # decomposed vs composed accent (NFKC composes)
    assert names_subject("the ﬁle is", "file")  # NFKC folds the ligature


def test_marks_cover_every_forgotten_subject_of_the_batch():
    cases = [
        _case("a", "Nintendo DS", "Nintendo DS, created by", ["Nintendo DS Lite, created by", "Game Boy, created by"]),
        _case(
            "b", "Toyota Corolla", "Toyota Corolla is made by", ["Toyota Vitz is made by", "Toyota Corolla Levin is"]
        ),
        _case("c", "Paris", "Paris is in", []),
    ]
    marks = neighbours_naming_forgotten_subjects(cases)
    assert marks == [[True, False], [False, True], []]
    # a subject forgotten by another case of the batch counts too
    cases[1] = _case("b", "Toyota Corolla", "Toyota Corolla is made by", ["Nintendo DS Lite is made by"])
    assert neighbours_naming_forgotten_subjects(cases)[1] == [True]


def _scores(neighbour_acc):
    empty = {"acc": [], "first_acc": [], "prob": [], "pred_ids": []}
    return CaseScores(forget={"acc": [0.0], "first_acc": [0.0], "prob": [0.1], "pred_ids": [[1]]}, paraphrase=empty,
                      neighbour={"acc": neighbour_acc, "first_acc": neighbour_acc, "prob": neighbour_acc,
                                 "pred_ids": [[1]] * len(neighbour_acc)}, groups={})


def test_spe_distinct_leaves_out_the_named_prompts_only():
    post = [_scores([0.0, 1.0, 1.0]), _scores([0.0]), _scores([1.0, 0.5])]
    named = [[True, False, False], [True], [False, False]]
    out = probe_metrics(post, named=named)
    # spe: case means 2/3, 0, 0.75; spe_distinct: case 2 has no distinct neighbour and drops out
    assert out["spe"] == pytest.approx(100 * (2 / 3 + 0 + 0.75) / 3)
    assert out["spe_distinct"] == pytest.approx(100 * (1.0 + 0.75) / 2)
    assert out["neighbours_named"] == 2.0
    assert "spe_distinct" not in probe_metrics(post)
    with pytest.raises(ValueError, match="named"):
        probe_metrics(post, named=[[True], [True], [False, False]])
