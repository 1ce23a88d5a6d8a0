"""``zerounlearn retain-set``: a retain file of same-answer facts that ``unlearn --retain`` reads; bad input named."""
from __future__ import annotations

import json

import pytest

from zerounlearn_editor.applications.retain_set import build_retain_set, known_facts_mask, read_facts, read_pool
from zerounlearn_editor.applications.unlearn import read_retain_set
from zerounlearn_editor.cli import main
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET

FACTS = [{"prompt": "Danielle Darrieux's mother tongue is", "subject": "Danielle Darrieux", "answer": "French"},
         {"prompt": "The capital of Japan is", "subject": "Japan", "answer": "Tokyo"},
         {"prompt": "Toko Yasuda plays the", "subject": "Toko Yasuda"}]


def _write(path, records):
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def _cf_record(i, prompt, subject, answer):
    """A CounterFact record in EasyEdit's format (a benchmark pool)."""
    return {"case_id": i, "prompt": prompt, "subject": subject, "target_new": "x", "ground_truth": answer,
            "rephrase_prompt": prompt, "locality_prompt": "Somewhere is", "locality_ground_truth": "y"}


def test_the_retain_file_holds_same_answer_facts_that_unlearn_reads(tmp_path, capsys):
    facts = _write(tmp_path / "facts.json", FACTS)
    pool = _write(tmp_path / "pool.json", [
        {"prompt": f"Person {i} speaks", "subject": f"Person {i}", "answer": "French"} for i in range(4)] + [
        {"prompt": "Osaka is near", "subject": "Osaka", "answer": "Tokyo"},
        {"prompt": "Japan's language is", "subject": "Japan", "answer": "Tokyo"},
        {"prompt": "Lyon is in", "subject": "Lyon", "answer": "France"}])
    out = tmp_path / "retain.json"
    assert main(["retain-set", "--facts", str(facts), "--pool", str(pool), "--k", "3", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert sorted(r["answer"] for r in records) == ["French"] * 3 + ["Tokyo"]
    assert {r["subject"] for r in records} & {"Japan", "Lyon"} == set()
    assert len(read_retain_set(out).requests.requests) == 4
    assert "4 retain facts for 2 of 3 facts to forget" in capsys.readouterr().out


def test_a_benchmark_file_is_a_pool_and_unmatched_answers_are_named(tmp_path):
    facts = _write(tmp_path / "facts.json", FACTS)
    pool = _write(tmp_path / "cf.json", [_cf_record(1, "Marcel Marceau, a native", "Marcel Marceau", "French"),
                                        _cf_record(2, "Orbe's language is", "Orbe", "French")])
    result = build_retain_set(read_facts(facts), read_pool(pool), k=5)
    assert sorted(r["subject"] for r in result.records) == ["Marcel Marceau", "Orbe"]
    assert result.served == 2 and result.unmatched == ["Tokyo"]
    assert "no eligible pool fact left with the answer of 1" in result.summary()
    assert result.summary().endswith(": Tokyo")


def test_a_fact_whose_answer_records_were_drawn_for_an_earlier_fact_is_named_as_left_without():
    facts = [{"prompt": "Anna's mother tongue is", "subject": "Anna", "answer": "French"},
             {"prompt": "Bruno's mother tongue is", "subject": "Bruno", "answer": "French"}]
    pool = [{"prompt": "Claire speaks", "subject": "Claire", "answer": "French"}]
    result = build_retain_set(facts, pool, k=1)
    assert [r["subject"] for r in result.records] == ["Claire"]
    assert result.served == 2 and result.unmatched == ["French"]
    assert "all drawn for earlier facts with that answer): French" in result.summary()


@pytest.mark.parametrize("pool, message", [
    ("nowhere.json", "neither a dataset name"),
    ("bad.json", "record 0: field 'subject'"),
])
def test_bad_input_is_named_and_nothing_is_written(tmp_path, caplog, pool, message):
    facts = _write(tmp_path / "facts.json", FACTS)
    _write(tmp_path / "bad.json", [{"prompt": "Lyon is in", "subject": "Paris", "answer": "France"}])
    out = tmp_path / "retain.json"
    assert main(["retain-set", "--facts", str(facts), "--pool", str(tmp_path / pool), "--out", str(out)]) == 2
    assert message in caplog.text and not out.exists()


@pytest.mark.slow
def test_with_a_model_only_the_facts_it_knows_are_served(smollm2):
    model, tok = smollm2
    facts = [{"prompt": p, "subject": s, "answer": a} for p, s, a in CAPITALS_TO_FORGET[:3]]
    facts.append({"prompt": "The capital of Zorblaxia is", "subject": "Zorblaxia", "answer": "Quenthorpe"})
    assert known_facts_mask(model, tok, facts) == [True, True, True, False]
