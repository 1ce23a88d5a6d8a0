"""Candidate retain facts drafted from general text: names near each answer, put into the fact's template."""
from __future__ import annotations

import pytest

from zerounlearn_editor.data.corpus_neighbours import (
    MAX_NAME_WORDS,
    corpus_candidates,
    entity_names,
    fact_template,
    ordinary_words,
)

TEXTS = [
    "Jean Rouch was born in Paris. He spoke French all his life. The Louvre and Paris drew him back.",
    "In Paris, the Congress of Vienna was discussed. Marcel Marceau spoke French on stage.",
    "Tokyo is large. Hayao Miyazaki works in Tokyo.",
]


def test_the_template_cuts_the_subject_out_once_and_escapes_braces():
    assert fact_template("The native language of Jean Rouch is", "Jean Rouch") == "The native language of {} is"
    template = fact_template("{Ana} says Ana is from", "Ana")
    assert template == "{{{}}} says Ana is from"
    assert template.format("Ana") == "{Ana} says Ana is from"
    assert fact_template("Lyon is in", "Paris") is None and fact_template("Lyon is in", "") is None


def test_names_are_capitalised_runs_and_a_sentence_opening_word_is_not_one():
    text = ("Jean Rouch met the Congress of Vienna in Paris. He left. The Louvre opened. In Mont Blanc Tunnel cars "
            "sold by U.S. Steel ran.Then Tom and Ann left, then slept, and the new owner went to New York.")
    names = entity_names(text, ordinary_words([text]))
    assert names == ["Jean Rouch", "Congress of Vienna", "Paris", "Louvre", "Mont Blanc Tunnel", "U.S. Steel", "Tom",
                     "Ann", "New York"]
    # without the text's vocabulary only a few function words are cut from a sentence's first name
    assert entity_names("It rained. Then Tom left. In Paris we ate.") == ["Then Tom", "Paris"]
    long_name = " ".join(["Alpha"] * (MAX_NAME_WORDS + 1))
    assert entity_names(f"we saw {long_name} there") == []


def test_a_name_ends_at_punctuation_possessives_and_line_breaks_and_starts_with_a_capital():
    text = ("Many of Blair's friends read Trump\u2019s book on the iPhone, anti-French \u00c9mile Zola said. "
            "They visited New York\n\nLouvre guards, \"Van Gogh\" fans and Brussels.In February they left. many "
            "people came in.")
    names = entity_names(text, ordinary_words([text]))
    assert names == ["Blair", "Trump", "\u00c9mile Zola", "New York", "Van Gogh", "Brussels", "February"]
    assert not any("\n" in n or n.endswith("s's") or n[0].islower() for n in names)


def test_a_word_written_capitalised_inside_sentences_is_not_ordinary():
    texts = ["We saw New York and New Delhi, a new city.", "Then the show began, and then it ended."]
    ordinary = ordinary_words(texts)
    assert "then" in ordinary and "new" not in ordinary and "york" not in ordinary


def test_candidates_are_the_commonest_names_near_the_answer_in_the_facts_template():
    facts = [{"prompt": "The mother tongue of Ginette Leclerc is", "subject": "Ginette Leclerc", "answer": "French"}]
    records = corpus_candidates(facts, TEXTS, per_fact=3)
    # "Paris" occurs in both French texts (3 times); "Tokyo"/"Hayao Miyazaki" are in a text without the answer
    assert records[0] == {"prompt": "The mother tongue of Paris is", "subject": "Paris", "answer": "French"}
    assert len(records) == 3
    subjects = {r["subject"] for r in records}
    assert "Paris" in subjects and not subjects & {"Tokyo", "Hayao Miyazaki", "French"}
    assert all(r["prompt"] == f"The mother tongue of {r['subject']} is" for r in records)


def test_forget_subjects_and_the_answer_are_never_candidates_and_records_are_not_repeated():
    facts = [{"prompt": "Jean Rouch's language is", "subject": "Jean Rouch", "answer": "French"},
             {"prompt": "Marcel Marceau's language is", "subject": "Marcel Marceau", "answer": "French"},
             {"prompt": "Jean Rouch's language is", "subject": "Jean Rouch", "answer": "French"},
             {"prompt": "Nobody here", "subject": "Absent", "answer": "French"},
             {"prompt": "Hayao Miyazaki works in", "subject": "Hayao Miyazaki", "answer": None}]
    records = corpus_candidates(facts, TEXTS, per_fact=50)
    subjects = [r["subject"] for r in records]
    # one template: the second fact's repeats of the first's two records do not use up its per_fact (one name left)
    assert [r["subject"] for r in corpus_candidates(facts[:2], TEXTS, per_fact=2)] == ["Paris", "Louvre",
                                                                                       "Congress of Vienna"]
    assert not {"Jean Rouch", "Marcel Marceau", "French"} & set(subjects)
    assert len({(r["prompt"], r["subject"]) for r in records}) == len(records)
    assert all(r["answer"] == "French" for r in records)
    assert {r["prompt"].split("'s")[0] for r in records} <= set(subjects)


def test_a_lower_case_answer_is_matched_in_any_case_and_per_fact_is_checked():
    facts = [{"prompt": "Hayao Miyazaki plays the", "subject": "Hayao Miyazaki", "answer": "piano"}]
    assert [r["subject"] for r in corpus_candidates(facts, ["Piano lessons with Clara Schumann began."])] == [
        "Clara Schumann"]
    with pytest.raises(ValueError, match="per_fact"):
        corpus_candidates(facts, TEXTS, per_fact=0)
