"""``benchmarks/deep/never_known.py`` and ``audit_variants.py --cases``: never-known facts drawn by the audit's own
"recovered" criterion, matched to a reference set's relations, audited in the listed order."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tiny_models import tiny_llama, tiny_tokenizer, with_head_bias
from zerounlearn_editor.data.types import Probe, UnlearnCase
from zerounlearn_editor.evaluation.audit import (
    AuditSettings,
    build_plan,
    items_from_cases,
    pool_from_facts,
    score_model,
)

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    for folder in ("benchmarks", "benchmarks/deep"):
        if str(ROOT / folder) not in sys.path:
            sys.path.insert(0, str(ROOT / folder))
    spec = importlib.util.spec_from_file_location(f"deep_{name}", ROOT / f"benchmarks/deep/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _case(case_id: str, prompt: str, subject: str, answer: str) -> UnlearnCase:
    request = {"prompt": prompt, "subject": subject, "ground_truth": answer, "target_new": ""}
    return UnlearnCase(case_id, request, [Probe(prompt, answer)], [], [], "counterfact-easyedit")


def test_answered_is_the_audits_prompt_column() -> None:
    """A case is never-known exactly when the audit's base row scores its prompt probe as not recovered."""
    never_known = _load("never_known")
    tok = tiny_tokenizer()
    cases = [_case("1", "the capital of france is", "france", "paris"),
             _case("2", "the capital of germany is", "germany", "berlin"),
             _case("3", "the old city in france is", "france", "paris")]
    model = with_head_bias(tok, tiny_llama(tok), "paris", 40.0)
    flags = never_known.answered(model, tok, cases)
    assert flags == [True, False, True]
    settings = AuditSettings(families=("formats",), batch_size=2)
    pool = pool_from_facts([("the capital of italy is", "italy", "rome"),
                            ("the capital of spain is", "spain", "madrid")])
    plan = build_plan(items_from_cases(cases), pool, tok, settings)
    assert score_model(model, tok, plan, settings)["prompt"]["items"] == [int(f) for f in flags]


def test_matched_draw_prefers_template_then_relation_then_any() -> None:
    draw = _load("never_known").matched_draw
    reference = [("capital of {}", "P36"), ("{} speaks", "P1412"), ("{} plays", "P413")]
    candidates = [("10", "capital of {}", "P36"), ("11", "{}'s capital is", "P36"), ("12", "{} talks", "P1412"),
                  ("13", "{} was born in", "P19")]
    ids, levels = draw(reference, candidates, seed=3)
    picked = dict(zip(ids, levels))
    assert picked["10"] == "template" and picked["12"] == "relation_id"
    assert sorted(levels) == ["any", "relation_id", "template"] and len(set(ids)) == 3
    assert draw(reference, candidates, seed=3) == (ids, levels)  # seeded
    with pytest.raises(ValueError, match="2 candidates for 3 reference facts"):
        draw(reference, candidates[:2], seed=3)


def test_template_ids_keep_unambiguous_templates() -> None:
    ids = _load("never_known").template_ids([("{} is in", "P17"), ("{} is in", "P131"), ("capital of {}", "P36"),
                                             ("capital of {}", "P36")])
    assert ids == {"capital of {}": "P36"}


def test_cases_file_selects_the_listed_cases_in_order(tmp_path: Path) -> None:
    listed_cases = _load("audit_variants").listed_cases
    cases = [SimpleNamespace(case_id=str(i)) for i in (5, 7, 9, 11)]
    path = tmp_path / "never.json"
    path.write_text(json.dumps({"case_ids": ["11", "5"]}))
    assert [c.case_id for c in listed_cases(path)(None, None, cases, None, min_accuracy=1.0)] == ["11", "5"]
    path.write_text(json.dumps({"case_ids": ["5", "42"]}))
    with pytest.raises(ValueError, match=r"never\.json: case id '42' is not in the data"):
        listed_cases(path)(None, None, cases, None)


def test_wilson_interval() -> None:
    spec = importlib.util.spec_from_file_location("audit_floor_table", ROOT / "benchmarks/audit/floor_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    low, high = module.wilson(0, 40)
    assert low == 0.0 and high == pytest.approx(100 * 1.96**2 / (40 + 1.96**2))  # 8.8: the rule-of-three-like bound
    low, high = module.wilson(20, 40)
    assert (low, high) == (pytest.approx(35.2, abs=0.05), pytest.approx(64.8, abs=0.05))
    assert module.wilson(3, 0) == (0.0, 100.0)


def _floor_fisher():
    spec = importlib.util.spec_from_file_location("audit_floor_fisher", ROOT / "benchmarks/audit/floor_fisher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fisher_two_sided() -> None:
    fisher = _floor_fisher().fisher_two_sided
    assert fisher(10, 30, 6, 74) == pytest.approx(0.011183, abs=1e-6)  # RESULTS §7: rm-r8's int4 prompt, p .011
    assert fisher(3, 1, 1, 3) == pytest.approx(0.485714, abs=1e-6)  # the tea-tasting table: 34 / 70
    assert fisher(0, 40, 6, 74) == pytest.approx(0.176791, abs=1e-6)
    assert fisher(5, 5, 5, 5) == 1.0


def test_floor_pools_draws_and_counts_a_draws_probe_once(tmp_path: Path) -> None:
    def seed_file(name: str, probes: dict) -> str:
        path = tmp_path / name
        path.write_text(json.dumps({"methods": {"base": {"probes": {
            key: {"items": items} for key, items in probes.items()}}}}), encoding="utf-8")
        return str(path)

    draw1 = seed_file("d1.json", {"prompt": [0, 0], "mc": [1, 0], "relearn-mlp": [1, 1]})
    draw2 = seed_file("d2.json", {"prompt": [0, 1], "mc": [1, 1]})
    draw2_more = seed_file("d2r.json", {"prompt": [1, 1], "relearn-mlp": [0, 1]})
    floor = _floor_fisher().pooled([draw1, f"{draw2},{draw2_more}"])
    assert floor == {"prompt": (1, 4), "mc": (3, 4), "relearn-mlp": (3, 4)}
