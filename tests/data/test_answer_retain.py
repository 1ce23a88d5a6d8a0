"""The same-answer retain draw (:mod:`zerounlearn_editor.data.answer_retain`): what it draws and what it never draws."""
from __future__ import annotations

import pytest

from zerounlearn_editor.data.answer_retain import answer_key, draw_answer_retain, eligible_pool


def fact(prompt: str, subject: str, answer):
    return {"prompt": prompt, "subject": subject, "answer": answer}


FORGET = [
    fact("Danielle Darrieux's mother tongue is", "Danielle Darrieux", "French"),
    fact("The capital of Japan is", "Japan", "Tokyo"),
    fact("Toko Yasuda plays the", "Toko Yasuda", None),
]
POOL = [fact(f"Person {i} speaks", f"Person {i}", "french ") for i in range(6)] + [
    fact("Osaka is near", "Osaka", "Tokyo"),
    fact("Lyon is in", "Lyon", "France"),
    fact("Danielle Darrieux was born in", "Danielle Darrieux", "French"),   # a forgotten subject
    fact("Japan's language is", "Japan", "Japanese"),                      # a forgotten subject
    fact("The mother of Danielle Darrieux speaks", "mother", "French"),     # names a forgotten subject
    fact("Toko speaks", "Toko", "French"),                                 # inside a forget prompt
    fact("The capital of Japan is", "capital", "Tokyo"),                   # a forget prompt
    fact("Somebody speaks", "Nobody", "French"),                           # subject not in the prompt
    fact("Person 0 speaks", "Person 0", "French"),                         # a repeat
    fact("Marie speaks", "Marie", None),                                   # no answer
]


def test_only_same_answer_records_are_drawn_case_insensitively_up_to_k():
    groups = draw_answer_retain(FORGET, POOL, k=4, seed=1)
    assert len(groups) == 3
    assert len(groups[0]) == 4 and all(answer_key(r["answer"]) == "french" for r in groups[0])
    assert [r["subject"] for r in groups[1]] == ["Osaka"]  # the only eligible Tokyo record
    assert groups[2] == []  # a fact without an answer gets nothing


def test_records_naming_a_forgotten_subject_or_prompt_are_never_eligible():
    eligible = {r["subject"] for r in eligible_pool(FORGET, POOL)}
    assert eligible == {f"Person {i}" for i in range(6)} | {"Osaka", "Lyon"}


def test_a_record_is_drawn_for_one_fact_only_and_the_draw_is_deterministic():
    twice = [fact("Arnaud Amalric's mother tongue is", "Arnaud Amalric", "French"),
             fact("Jean Dupont's mother tongue is", "Jean Dupont", "French")]
    groups = draw_answer_retain(twice, POOL, k=4, seed=3)
    drawn = [r["subject"] for g in groups for r in g]
    # nine French records are eligible now (nobody named in them is forgotten): 4 + 4 distinct ones
    assert len(drawn) == len(set(drawn)) == 8
    assert draw_answer_retain(twice, POOL, k=4, seed=3) == groups
    assert draw_answer_retain(twice, POOL, k=4, seed=4) != groups


def test_serve_leaves_unserved_facts_without_retain_and_bad_arguments_are_refused():
    groups = draw_answer_retain(FORGET, POOL, k=2, serve=[False, True, True])
    assert groups[0] == [] and len(groups[1]) == 1
    with pytest.raises(ValueError, match="k must be >= 1"):
        draw_answer_retain(FORGET, POOL, k=0)
    with pytest.raises(ValueError, match="serve has 2 entries for 3 facts"):
        draw_answer_retain(FORGET, POOL, k=1, serve=[True, True])
