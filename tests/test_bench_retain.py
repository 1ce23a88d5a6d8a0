"""Bench retain sets: sibling draws never leak into scored prompts; +R rows get them, others do not."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.bench import BenchConfig, BenchConfigError, run_bench
from zerounlearn_editor.bench.retain_sets import (
    check_retain_disjoint,
    draw_sibling_retain,
    evaluated_prompts,
    parse_retain_spec,
)
from zerounlearn_editor.data.registry import load_cases, sample_cases
from zerounlearn_editor.data.types import Probe, UnlearnCase


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
        _case(8, "Japan Airlines"),   # a different subject (it contains one, but is not named by a scored prompt)
    ]
    retain = draw_sibling_retain(sampled, pool, k=2, seed=3)
    subjects = [r["subject"] for r in retain]
    assert len(retain) == 4 and set(subjects) <= {"Peru", "Chile", "Kenya", "Japan Airlines"}
    assert all(set(r) == {"prompt", "subject"} for r in retain)
    assert draw_sibling_retain(sampled, pool, k=2, seed=3) == retain  # deterministic
    scored = " ".join(evaluated_prompts(sampled)).casefold()
    assert not any(s.casefold() in scored for s in subjects)


def test_a_leaking_retain_set_is_refused():
    sampled = [_case(0, "France", neighbours=["Victor Hugo was born in"])]
    with pytest.raises(BenchConfigError, match="retain request 1 .*overlaps the scored cases"):
        check_retain_disjoint([{"prompt": "The capital of Peru is", "subject": "Peru"},
                               {"prompt": "Victor Hugo wrote in", "subject": "Victor Hugo"}], sampled)
    with pytest.raises(BenchConfigError, match="carry no relation"):
        draw_sibling_retain([_case(0, "France", relation=None)], [], 2, 0)


@pytest.mark.parametrize("spec", ["siblings", "siblings:0", "cousins:3", "siblings:x"])
def test_bad_retain_specs(spec):
    with pytest.raises(BenchConfigError, match="siblings:K"):
        parse_retain_spec(spec)


def test_bench_gives_the_retain_set_to_plus_r_rows_only(tmp_path):
    root = tmp_path
    data = write_tiny_counterfact(root / "cf.json")
    corpus = write_corpus(root / "corpus.jsonl")
    ppl = root / "ppl.txt"
    ppl.write_text("the city of paris is a large city in france " * 6, encoding="utf-8")
    for name, extra in (("tiny", {}), ("tiny-retain", {"retain_nullspace_weight": 1e4})):
        path = root / "hparams" / "ZeroUnlearn-GD" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(tiny_hparams_dict(root / "stats", corpus, alg_name="ZeroUnlearn-GD", **extra)))
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
    assert "retain set: per forget case 2 other records of the same relation" in (root / "out" / "summary.md").read_text()
    # same cases and targets: the +R row reused the paper row's neutral targets
    assert record["methods"]["ZeroUnlearn-GD+R"]["details"]["targets_reused_from"] == "ZeroUnlearn-GD"
