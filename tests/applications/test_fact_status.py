"""The status a ledger gives each fact (:mod:`zerounlearn_editor.applications.fact_status`): forgotten only when the
fact was answered before its edit and is not answered now; every other outcome has its own status."""
from __future__ import annotations

import pytest

from zerounlearn_editor.applications.fact_status import (
    ANSWERED_STATUSES,
    edit_count,
    fact_status,
    format_counts,
    is_answered,
    merged_facts,
    names_answer,
    status_counts,
)


@pytest.mark.parametrize("before, after, unanswered, expected", [
    (True, False, 0, "forgotten"),
    (False, False, 0, "not_known"),
    (True, True, None, "still_answered"),
    (False, True, None, "taught"),
    (True, True, 0, "came_back"),
    (False, True, 1, "came_back"),
    (None, None, None, "no_answer"),
])
def test_fact_status(before, after, unanswered, expected):
    assert fact_status(before, after, unanswered) == expected
    assert (expected in ANSWERED_STATUSES) == bool(after)  # never "forgotten" for a fact the model gives


def _fact(name: str, answer: str = "a") -> dict:
    return {"prompt": f"the {name} is", "subject": name, "ground_truth": answer}


def test_a_chain_of_edits_records_what_each_edit_did():
    """Edit 0 forgets x, finds y unknown; edit 1 (on z) brings x back and teaches y; edit 2 targets x again and
    forgets it: one record for x, with both its edits."""
    x, y, z = _fact("x"), _fact("y"), _fact("z")
    first = merged_facts([], [], [x, y], [True, False], [False, False], 0, "t0")
    assert [r["status"] for r in first] == ["forgotten", "not_known"]
    assert [r["first_unanswered_edit"] for r in first] == [0, 0]
    second = merged_facts(first, [True, True], [z], [True], [True], 1, "t1")
    assert [r["status"] for r in second] == ["came_back", "came_back", "still_answered"]
    assert [r["as_of_edit"] for r in second] == [1, 1, 1] and second[0]["edit"] == 0
    assert [r["status_since_edit"] for r in second] == [1, 1, 1]
    third = merged_facts(second, [None, True, True], [x], [True], [False], 2, "t2")
    assert [r["prompt"] for r in third] == ["the x is", "the y is", "the z is"]
    assert third[0]["status"] == "forgotten" and third[0]["edits"] == [0, 2] and third[0]["edit"] == 2
    assert third[0]["first_unanswered_edit"] == 0 and third[0]["time"] == "t2"
    assert third[1]["status"] == "came_back" and third[1]["status_since_edit"] == 1  # unchanged since edit 1
    assert edit_count(third) == 4  # x twice: the carried state holds its keys twice
    # x edited again while forgotten (not answered before that edit): still "forgotten", it was known before edit 0
    again = merged_facts(first, [None, False], [x], [False], [False], 1, "t1")
    assert again[0]["status"] == "forgotten" and again[0]["answered_before"] is True


def test_counts_separate_the_outcomes():
    counts = status_counts(["forgotten", "not_known", "not_known", "no_answer"])
    assert counts["forgotten"] == 1 and counts["not_known"] == 2 and counts["came_back"] == 0
    text = format_counts(counts)
    assert text.startswith("1 forgotten, 2 not known before") and "came back" not in text


@pytest.mark.parametrize("text, answer, expected", [
    (" Paris.\n\n", "Paris", True),
    (":\n\n* French", "French", True),  # named after a preamble: the model still gives it
    ("<start_of_image>French is the", "French", True),
    (" paris is", "Paris", True),  # case-insensitive
    (" Mexico\nCity.", "Mexico City", True),  # whitespace runs equal
    (" Parisian food", "Paris", False),  # not inside a longer word
    (" the city of", "Paris", False),
    ("<eos>", "Paris", False),
    (" a+b", "a+b", True),  # regex characters are literal
    (" aab", "a+b", False),
    (" anything", "", False),
    (" about 3.5 million", "3", False),  # not part of a longer number
    (" 1,990 people", "1", False),
    (" 19000", "1900", False),
    (" in 1990.", "1990", True),
    ("北京市是", "北京", True),  # no spaces between words: named anywhere
    (" 東京は", "東京", True),
    (" Cafe\u0301 de Flore", "Caf\u00e9 de Flore", True),  # the same text in NFD and NFC
])
def test_names_answer(text, answer, expected):
    assert names_answer(text, answer) is expected


def test_is_answered_counts_the_next_tokens_or_a_named_answer():
    assert is_answered(1.0, "Paris", "<eos>") is True  # the answer's tokens are the greedy ones
    assert is_answered(0.0, "French", ":\n\n* French") is True
    assert is_answered(0.5, "Mexico City", " Mexico is") is False
    assert is_answered(None, None, " Paris") is None and is_answered(0.0, "", "") is None
