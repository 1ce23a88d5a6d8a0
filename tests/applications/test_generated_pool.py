"""``retain-set --generate``: the pool the model writes (names it lists after each subject, in the fact's prompt,
kept where the model gives the fact's answer)."""
from __future__ import annotations

import json

import pytest
import torch

from zerounlearn_editor.applications import retain_set
from zerounlearn_editor.applications.generated_pool import generate_pool, list_context, names_in
from zerounlearn_editor.applications.retain_set import known_facts_mask
from zerounlearn_editor.cli import main

FACTS = [{"prompt": "The mother tongue of Danielle Darrieux is", "subject": "Danielle Darrieux", "answer": "French"},
         {"prompt": "Toyota Corolla is produced by", "subject": "Toyota Corolla", "answer": "Toyota"}]


def test_the_context_opens_a_list_with_the_subject():
    assert list_context(FACTS[1]) == "Toyota Corolla is produced by Toyota.\nOther examples: Toyota Corolla,"


def test_names_are_the_first_lines_list_items_less_subjects_markup_and_lower_case_words():
    text = " Toyota Camry, Danielle Darrieux Jr, the Prius, <b>Lexus</b>, Corolla and Toyota Yaris.\nHonda Civic, X"
    assert names_in(text, FACTS) == ["Toyota Camry", "Toyota Yaris"]
    assert names_in(" 4Runner; " + "A" * 61, FACTS) == []  # one item: "4Runner; AAA...", over 60 characters
    assert names_in(" 4Runner, Land Cruiser.", FACTS) == ["4Runner", "Land Cruiser"]


class _ListingModel:
    """Stands in for a causal LM: ``generate`` appends one token per sample (10, 11, ...) and records the seed."""

    device = torch.device("cpu")

    def __init__(self):
        self.seeds = []

    def generate(self, ids, attention_mask, **kwargs):
        assert attention_mask.shape == ids.shape and kwargs["do_sample"]
        self.seeds.append(torch.initial_seed())
        return torch.cat([ids, 10 + torch.arange(ids.shape[0]).unsqueeze(1)], dim=1)


class _Tokenizer:
    eos_token_id = 0
    lists = {10: " Toyota Camry, Lexus LS\nmore", 11: " Lexus LS and Toyota Yaris", 12: " Marcel Marceau"}

    def __call__(self, text, return_tensors):
        return {"input_ids": torch.tensor([[1, 2, 3]])}

    def decode(self, row, skip_special_tokens):
        return self.lists[int(row[0])]


def test_the_pool_keeps_each_prompt_once_and_only_what_the_model_knows(monkeypatch):
    scored = []

    def knows(model, tok, records):
        scored.extend(records)
        return ["Lexus" not in r["subject"] for r in records]

    monkeypatch.setattr(retain_set, "known_facts_mask", knows)
    model = _ListingModel()
    facts = FACTS + [{"prompt": "Nobody is", "subject": "Nobody", "answer": None}]
    pool = generate_pool(model, _Tokenizer(), facts, samples=3, seed=7)
    assert model.seeds == [7, 8]  # fact i sampled with seed + i; the fact without an answer not at all
    assert [r["prompt"] for r in scored] == [
        "The mother tongue of Toyota Camry is", "The mother tongue of Lexus LS is",
        "The mother tongue of Toyota Yaris is", "The mother tongue of Marcel Marceau is",
        "Toyota Camry is produced by", "Lexus LS is produced by", "Toyota Yaris is produced by",
        "Marcel Marceau is produced by"]
    assert pool == [{"prompt": p, "subject": s, "answer": a} for p, s, a in [
        ("The mother tongue of Toyota Camry is", "Toyota Camry", "French"),
        ("The mother tongue of Toyota Yaris is", "Toyota Yaris", "French"),
        ("The mother tongue of Marcel Marceau is", "Marcel Marceau", "French"),
        ("Toyota Camry is produced by", "Toyota Camry", "Toyota"),
        ("Toyota Yaris is produced by", "Toyota Yaris", "Toyota"),
        ("Marcel Marceau is produced by", "Marcel Marceau", "Toyota")]]


def test_generate_without_a_model_is_refused_before_anything_is_read(tmp_path, caplog):
    out = tmp_path / "retain.json"
    assert main(["retain-set", "--facts", str(tmp_path / "absent.json"), "--generate", "--out", str(out)]) == 2
    assert "--generate needs --model" in caplog.text and not out.exists()


def test_pool_and_generate_are_one_or_the_other(tmp_path):
    with pytest.raises(SystemExit):
        main(["retain-set", "--facts", "f.json", "--generate", "--pool", "p.json", "--out", str(tmp_path / "r")])


@pytest.mark.slow
def test_smollm2_writes_a_pool_it_knows_and_the_draw_serves_it(smollm2, tmp_path, monkeypatch):
    model, tok = smollm2
    facts = FACTS[1:] + [{"prompt": "The Eiffel Tower is located in the city of", "subject": "The Eiffel Tower",
                          "answer": "Paris"}]
    pool = generate_pool(model, tok, facts, seed=0)
    assert pool and pool == generate_pool(model, tok, facts, seed=0)
    assert all(known_facts_mask(model, tok, pool))
    subjects = {f["subject"] for f in facts}
    for record in pool:
        fact = next(f for f in facts if f["answer"] == record["answer"])
        assert record["subject"] not in subjects
        assert record["prompt"] == fact["prompt"].replace(fact["subject"], record["subject"])
    monkeypatch.setattr("zerounlearn_editor.support.model_zoo.load_model_and_tokenizer", lambda *a, **k: smollm2)
    (tmp_path / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    out = tmp_path / "retain.json"
    assert main(["retain-set", "--facts", str(tmp_path / "facts.json"), "--generate", "--model", "smollm2",
                 "--seed", "0", "--out", str(out)]) == 0
    drawn = json.loads(out.read_text())
    assert drawn and all(r in pool for r in drawn)



def test_a_fact_not_served_costs_no_sampling_and_its_subject_still_bars_names(monkeypatch):
    monkeypatch.setattr(retain_set, "known_facts_mask", lambda model, tok, records: [True] * len(records))
    model = _ListingModel()
    facts = FACTS + [{"prompt": "Lexus LS is made by", "subject": "Lexus LS", "answer": "Toyota"}]
    pool = generate_pool(model, _Tokenizer(), facts, samples=3, seed=7, serve=[False, True, False])
    assert model.seeds == [8]
    assert [r["subject"] for r in pool] == ["Toyota Camry", "Toyota Yaris", "Marcel Marceau"]
    with pytest.raises(ValueError, match="serve has 1 entries for 3 facts"):
        generate_pool(model, _Tokenizer(), facts, serve=[True])
