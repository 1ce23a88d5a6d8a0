"""Bench retain sets: sibling and same-answer draws never leak into scored prompts; +R rows get them, others do not."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.data.types import Probe, UnlearnCase
from zerounlearn_editor.harness import BenchConfig, BenchConfigError, run_bench
from zerounlearn_editor.harness.retain_sets import (
    RetainDraw,
    check_retain_disjoint,
    draw_retain,
    draw_same_answer_retain,
    draw_sibling_retain,
    evaluated_prompts,
    parse_retain_spec,
)


def _case(i: int, subject: str, relation: str = "P36", neighbours=()) -> UnlearnCase:
    prompt = f"The capital of {subject} is"
    return UnlearnCase(
        case_id=str(i), request={"prompt": prompt, "subject": subject, "ground_truth": "x", "target_new": ""},
        forget=[Probe(prompt, "x")], paraphrase=[Probe(f"{subject}'s capital is", "x")],
        neighbour=[Probe(p, "x") for p in neighbours], source="test", relation=relation,
    )


def test_siblings_are_same_relation_and_never_scored():
    sampled = [_case(0, "France", neighbours=["The capital of Spain is"]), _case(1, "Japan")]
    pool = sampled + [
        _case(2, "Spain"),            # named by a scored neighbourhood prompt
        _case(3, "France"),           # same subject as a forgotten case
        _case(4, "Peru"), _case(5, "Chile"), _case(6, "Kenya"),
        _case(7, "Oslo", relation="P17"),  # another relation
        _case(8, "Japan Airlines"),   # its prompt names the forgotten subject Japan
        _case(9, "Ghana"),
    ]
    retain = draw_sibling_retain(sampled, pool, k=2, seed=3)
    subjects = [r["subject"] for r in retain]
    assert len(retain) == 4 and set(subjects) <= {"Peru", "Chile", "Kenya", "Ghana"}
    assert all(set(r) == {"prompt", "subject"} for r in retain)
    assert draw_sibling_retain(sampled, pool, k=2, seed=3) == retain  # deterministic
    scored = " ".join(evaluated_prompts(sampled)).casefold()
    assert not any(s.casefold() in scored for s in subjects)


def test_a_leaking_retain_set_is_refused():
    sampled = [_case(0, "France", neighbours=["Victor Hugo was born in"])]
    with pytest.raises(BenchConfigError, match="retain request 1 .*overlaps the scored cases"):
        check_retain_disjoint([{"prompt": "The capital of Peru is", "subject": "Peru"},
                               {"prompt": "Victor Hugo wrote in", "subject": "Victor Hugo"}], sampled)
    with pytest.raises(BenchConfigError, match="retain request 0 .*names a forgotten subject"):
        check_retain_disjoint(
            [{"prompt": "The airline of France, Air Inter, is based in", "subject": "Air Inter"}], sampled
        )
    check_retain_disjoint([{"prompt": "The capital of Peru is", "subject": "Peru"}], sampled)  # no overlap: accepted
    with pytest.raises(BenchConfigError, match="carry no relation"):
        draw_sibling_retain([_case(0, "France", relation=None)], [], 2, 0)


@pytest.mark.parametrize("spec", ["siblings", "siblings:0", "cousins:3", "siblings:x"])
def test_bad_retain_specs(spec):
    with pytest.raises(BenchConfigError, match="siblings:K"):
        parse_retain_spec(spec)


def _bench_workspace(root: Path):
    """Tiny CounterFact, corpus, PPL text and the GD hparams ``tiny.yaml`` / ``tiny-retain.yaml`` (for +R)
    under ``root``; returns ``(data, ppl)``."""
    data = write_tiny_counterfact(root / "cf.json")
    corpus = write_corpus(root / "corpus.jsonl")
    ppl = root / "ppl.txt"
    ppl.write_text("the city of paris is a large city in france " * 6, encoding="utf-8")
    for name, extra in (("tiny", {}), ("tiny-retain", {"retain_nullspace_weight": 1e4})):
        path = root / "hparams" / "ZeroUnlearn-GD" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(tiny_hparams_dict(root / "stats", corpus, alg_name="ZeroUnlearn-GD", **extra)))
    return data, ppl


def test_bench_gives_the_retain_set_to_plus_r_rows_only(tmp_path):
    root = tmp_path
    data, ppl = _bench_workspace(root)
    config = BenchConfig(
        hparams=str(root / "hparams" / "ZeroUnlearn-GD" / "tiny.yaml"), data=str(data), seeds=[1],
        methods=["base", "ZeroUnlearn-GD", "ZeroUnlearn-GD+R"], out=str(root / "out"), n=3, ppl_tokens=20,
        ppl_text=str(ppl), progress=False,
    )
    with pytest.raises(BenchConfigError, match="need a retain set"):
        run_bench(config, model=tiny_llama(tiny_tokenizer()), tok=tiny_tokenizer())
    config = dataclasses.replace(config, retain="siblings:2")
    tok = tiny_tokenizer()
    summary = run_bench(config, model=tiny_llama(tok), tok=tok)
    record = json.loads((root / "out" / "seed_1.json").read_text())
    cases = sample_cases(load_cases(str(data)), 3, 1)
    assert record["retain"] and record["run"]["retain"] == "siblings:2"
    check_retain_disjoint(record["retain"], cases)
    assert record["methods"]["ZeroUnlearn-GD+R"]["details"]["retain_count"] == len(record["retain"])
    assert "retain_count" not in record["methods"]["ZeroUnlearn-GD"]["details"]
    assert summary["methods"]["ZeroUnlearn-GD+R"]["status"] == "ok"
    assert (
        "retain set: per forget case 2 other records of the same relation" in (root / "out" / "summary.md").read_text()
    )
    # same cases and targets: the +R row reused the paper row's neutral targets
    assert record["methods"]["ZeroUnlearn-GD+R"]["details"]["targets_reused_from"] == "ZeroUnlearn-GD"


# --- same-answer:K ---------------------------------------------------------------------------


def _fact(i: int, subject: str, answer: str, relation: str = "by", neighbours=()) -> UnlearnCase:
    """A CounterFact-like case ``"<subject>, by" -> answer`` (relation and answer chosen per test)."""
    prompt = f"{subject}, by"
    return UnlearnCase(
        case_id=str(i), request={"prompt": prompt, "subject": subject, "ground_truth": answer, "target_new": ""},
        forget=[Probe(prompt, answer)], paraphrase=[Probe(f"{subject} is made by", answer)],
        neighbour=[Probe(p, answer) for p in neighbours], source="test", relation=relation,
    )


def _policy_pool():
    """One forget case (answer BBC, relation 'by') and a pool with every kind of candidate."""
    forget = _fact(0, "BBC One", "BBC")
    pool = [forget,
            _fact(1, "Radio Four", "BBC"), _fact(2, "Look North", "  bbc "),           # same relation + answer
            _fact(3, "Newsround", "BBC", relation="owner"),                            # same answer only
            _fact(4, "Blue Peter", "bbc", relation="made"),
            _fact(5, "Sky Atlantic", "Sky"), _fact(6, "ITV2", "ITV"), _fact(7, "E4", "Channel 4"),  # same relation
            _fact(8, "Le Monde", "Paris", relation="city")]                            # neither
    return forget, pool


def _subjects(retain):
    return [r["subject"] for r in retain]


def test_same_answer_draws_same_relation_and_answer_first_then_same_answer_then_siblings():
    forget, pool = _policy_pool()
    same_both, same_answer, same_relation = (
        {"Radio Four", "Look North"},
        {"Newsround", "Blue Peter"},
        {"Sky Atlantic", "ITV2", "E4"},
    )
    for seed in range(5):
        two = _subjects(draw_same_answer_retain([forget], pool, k=2, seed=seed))
        assert set(two) == same_both
        three = _subjects(draw_same_answer_retain([forget], pool, k=3, seed=seed))
        assert set(three[:2]) == same_both and three[2] in same_answer
        five = _subjects(draw_same_answer_retain([forget], pool, k=5, seed=seed))
        assert set(five[:2]) == same_both and set(five[2:4]) == same_answer and five[4] in same_relation
        everything = _subjects(draw_same_answer_retain([forget], pool, k=20, seed=seed))
        assert sorted(everything) == sorted(same_both | same_answer | same_relation)  # never 'Le Monde'
    # the siblings policy draws from the same relation only, whatever the answer
    siblings = set(_subjects(draw_sibling_retain([forget], pool, k=20, seed=0)))
    assert siblings == same_both | same_relation


def test_same_answer_degrades_to_same_relation_records_when_no_answer_is_shared():
    forget = _fact(0, "BBC One", "BBC")
    pool = [
        forget,
        _fact(1, "Sky Atlantic", "Sky"),
        _fact(2, "ITV2", "ITV"),
        _fact(3, "Le Monde", "Paris", relation="city"),
    ]
    assert set(_subjects(draw_same_answer_retain([forget], pool, k=5, seed=1))) == {"Sky Atlantic", "ITV2"}


def test_same_answer_draws_keep_the_leak_exclusions():
    sampled = [_fact(0, "BBC One", "BBC", neighbours=["BBC Radio, by", "Grandstand was made by"]),
               _fact(1, "BBC Two", "BBC")]
    pool = sampled + [
        _fact(2, "BBC Radio", "BBC"),              # named by a scored neighbourhood prompt
        _fact(3, "Grandstand", "BBC", relation="made"),  # likewise, another relation
        _fact(4, "BBC One", "BBC"),                # same subject as a forgotten case
        _fact(5, "BBC Two", "BBC", relation="owner"),
        _fact(6, "BBC Four", "BBC"), _fact(7, "CBBC", "BBC"), _fact(8, "Newsround", "BBC", relation="owner"),
        _fact(9, "Sky Atlantic", "Sky"),
    ]
    retain = draw_same_answer_retain(sampled, pool, k=3, seed=2)
    subjects = _subjects(retain)
    assert sorted(subjects) == sorted(["BBC Four", "CBBC", "Newsround", "Sky Atlantic"])  # no duplicates
    assert set(subjects[:2]) == {"BBC Four", "CBBC"}  # the first case takes both same-relation+answer records
    assert all(set(r) == {"prompt", "subject"} for r in retain)  # prompts only, no answers
    scored = " ".join(evaluated_prompts(sampled)).casefold()
    assert not any(s.casefold() in scored for s in subjects)
    check_retain_disjoint(retain, sampled)
    # a record whose prompt is itself a scored prompt is never drawn, whatever its subject
    leaky = _fact(10, "Extra", "BBC")
    leaky.request["prompt"] = "BBC Two, by"
    assert "Extra" not in _subjects(draw_same_answer_retain(sampled, pool + [leaky], k=9, seed=2))


def test_same_answer_draws_are_deterministic_in_the_seed():
    forget = _fact(0, "BBC One", "BBC")
    pool = [forget] + [_fact(i, f"Show {i}", "BBC") for i in range(1, 30)]
    draws = {seed: _subjects(draw_same_answer_retain([forget], pool, k=4, seed=seed)) for seed in range(6)}
    assert draws[3] == _subjects(draw_same_answer_retain([forget], pool, k=4, seed=3))
    assert len({tuple(d) for d in draws.values()}) > 1  # the seed matters
    assert draw_retain(RetainDraw(4, "same-answer"), [forget], pool, 3) == draw_same_answer_retain([forget], pool, 4, 3)
    assert draw_retain(RetainDraw(4), [forget], pool, 3) == draw_sibling_retain([forget], pool, 4, 3)


@pytest.mark.parametrize(
    "spec", ["same-answer:0", "same-answer:x", "same-answer", "foo:3", "same_answer:3", "siblings:-1"]
)
def test_bad_retain_specs_name_both_policies(spec):
    with pytest.raises(BenchConfigError, match=r"'siblings:K' or 'same-answer:K' with K >= 1.*got"):
        parse_retain_spec(spec)


def test_retain_spec_round_trips_and_describe_differs_per_policy():
    siblings, same = parse_retain_spec("siblings:5"), parse_retain_spec(" same-answer:5 ")
    assert same == RetainDraw(5, "same-answer") and siblings == RetainDraw(5, "siblings")
    for draw in (siblings, same):
        assert parse_retain_spec(draw.spec) == draw
    assert same.spec == "same-answer:5" and siblings.spec == "siblings:5"
    assert siblings.describe() != same.describe()
    assert "true answer" in same.describe() and "true answer" not in siblings.describe()
    assert "same relation" in siblings.describe()
    assert parse_retain_spec("none") is None and parse_retain_spec(None) is None
    with pytest.raises(BenchConfigError, match="unknown policy"):
        RetainDraw(3, "cousins")
    BenchConfig(
        hparams="h.yaml", data="d.json", seeds=[1], methods=["ZeroUnlearn-GD+R"], out="o", retain="same-answer:3"
    ).validate()


def test_bench_runs_with_a_same_answer_retain_set(tmp_path):
    root = tmp_path
    data, ppl = _bench_workspace(root)
    config = BenchConfig(
        hparams=str(root / "hparams" / "ZeroUnlearn-GD" / "tiny.yaml"),
        data=str(data),
        seeds=[1],
        methods=["base", "ZeroUnlearn-GD+R"],
        out=str(root / "out"),
        n=3,
        ppl_tokens=20,
        ppl_text=str(ppl),
        progress=False,
        retain="same-answer:2",
    )
    tok = tiny_tokenizer()
    summary = run_bench(config, model=tiny_llama(tok), tok=tok)
    record = json.loads((root / "out" / "seed_1.json").read_text())
    cases = sample_cases(load_cases(str(data)), 3, 1)
    assert record["retain"] and record["run"]["retain"] == "same-answer:2"
    assert record["retain"] == draw_same_answer_retain(cases, load_cases(str(data)), 2, 1)
    check_retain_disjoint(record["retain"], cases)
    assert summary["methods"]["ZeroUnlearn-GD+R"]["status"] == "ok"
    text = (root / "out" / "summary.md").read_text()
    assert parse_retain_spec("same-answer:2").describe() in text and "`--retain same-answer:2`" in text
