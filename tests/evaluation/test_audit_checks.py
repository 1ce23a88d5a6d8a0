"""The audit's input checks and its pool (issue 36, items 2, 4, 7, 9, 12, 13, 15): bad settings and impossible
probes refused up front, naming the option or fact; non-finite probe models an error, never a 0; the pool has
same-relation material and says how much of it each probe got."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch
import yaml

from tiny_models import (
    CORPUS,
    tiny_gpt2,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
    write_tiny_counterfact,
)
from zerounlearn_editor.applications.unlearn import REPORT_NAME
from zerounlearn_editor.cli import main
from zerounlearn_editor.data.types import Probe, UnlearnCase
from zerounlearn_editor.evaluation.audit import (
    AuditSettings,
    LensConfig,
    build_plan,
    items_from_cases,
    items_from_facts,
    pool_from_cases,
    pool_from_facts,
    probe_columns,
    score_model,
)
from zerounlearn_editor.evaluation.audit import suite as suite_module
from zerounlearn_editor.harness import EditOutcome, MethodSpec, PreparedMethod, default_registry
from zerounlearn_editor.harness.audit import AuditConfig, run_audit

LENS = LensConfig(1, "model.layers.{}", "model.norm")
FORGET = [{"prompt": "the capital of france is", "subject": "france", "answer": "paris"},
          {"prompt": "the capital of germany is", "subject": "germany", "answer": "berlin"}]
POOL_FACTS = [(f"the capital of {s} is", s, a) for s, a in
              [("italy", "rome"), ("spain", "madrid"), ("japan", "tokyo"), ("egypt", "cairo"), ("england", "london")]]
GENERIC = ["many people live in london and it was known for its river", "tokyo is in asia and many people live there"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture()
def no_model_load(monkeypatch):
    """Loading any model is a test failure (the checks must come first)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr("zerounlearn_editor.support.model_zoo.load_model_and_tokenizer", refuse)


def _tiny_workspace(tmp_path: Path, gpt2: bool = False) -> Dict[str, Path]:
    """A saved tiny model, its corpus, a GD YAML naming it, a ROME-format CounterFact file."""
    tok = tiny_tokenizer()
    model_dir = tmp_path / "tiny-model"
    (tiny_gpt2(tok) if gpt2 else tiny_llama(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    hparams = tmp_path / "gd.yaml"
    hparams.write_text(
        yaml.safe_dump(
            tiny_hparams_dict(
                tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD", gpt2=gpt2, model_name=str(model_dir)
            )
        ),
        encoding="utf-8",
    )
    (tmp_path / "ppl.txt").write_text(" ".join(CORPUS), encoding="utf-8")
    return {"model": model_dir, "hparams": hparams, "data": write_tiny_counterfact(tmp_path / "cf.json")}


def _facts(tmp_path: Path, facts: List[Dict[str, Any]]) -> Path:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    return path


# ---- item 2 / 13: every setting finite and in range, before any model loads --------------------------------------

@pytest.mark.parametrize("lr", [math.inf, -math.inf, math.nan, 0.0, -1e-4, 5.0])
def test_relearning_lr_must_be_finite_and_in_range(lr):
    with pytest.raises(ValueError, match=r"relearn-lr.*finite"):
        AuditSettings(relearn_lr=lr).validate()


@pytest.mark.parametrize("options", [["--relearn-lr", "inf"], ["--relearn-lr", "nan"], ["--batch-size", "-2"],
                                     ["--batch-size", "0"]])
def test_audit_command_refuses_bad_numbers_before_loading(tmp_path, caplog, no_model_load, options):
    ws = _tiny_workspace(tmp_path)
    code = main(["audit", "--hparams", str(ws["hparams"]), "--data", str(ws["data"]), "--out", str(tmp_path / "o"),
                 "--n", "2", "--no-progress", *options])
    assert code == 2
    expected = "learning rate (--relearn-lr)" if "--relearn-lr" in options else "batch size must be >= 1"
    assert expected in caplog.text
    assert not (tmp_path / "o").exists()


def _command_args(command: str, tmp_path: Path, ws: Dict[str, Path]) -> List[str]:
    """The arguments of an ``unlearn`` (of :data:`FORGET`) or ``bench`` (of the tiny workspace) run, before options."""
    if command == "unlearn":
        return ["unlearn", "--facts", str(_facts(tmp_path, FORGET)), "--save", "none"]
    return ["bench", "--data", str(ws["data"]), "--out", str(tmp_path / "b"), "--n", "2", "--seeds", "1",
            "--methods", "base"]


@pytest.mark.parametrize("command", ["unlearn", "bench"])
def test_unlearn_and_bench_refuse_an_infinite_relearning_lr_before_loading(tmp_path, caplog, no_model_load, command):
    ws = _tiny_workspace(tmp_path)
    args = _command_args(command, tmp_path, ws)
    code = main([*args, "--hparams", str(ws["hparams"]), "--no-progress", "--audit", "--audit-relearn-lr", "inf"])
    assert code == 2 and "learning rate (--relearn-lr)" in caplog.text


def _nan_copy(model, *args, **kwargs):
    import copy

    twin = copy.deepcopy(model)
    with torch.no_grad():
        next(twin.parameters()).fill_(float("nan"))
    return twin


def test_a_relearned_copy_that_went_non_finite_is_an_error_not_a_zero(monkeypatch):
    tok = tiny_tokenizer()
    model = tiny_llama(tok)
    settings = AuditSettings(
        families=("relearning",), relearn_n=2, relearn_steps=1, relearn_scopes=("mlp",), batch_size=4
    )
    plan = build_plan(items_from_facts(FORGET), pool_from_facts(POOL_FACTS), tok, settings, GENERIC)
    monkeypatch.setattr(suite_module, "relearned_copy", _nan_copy)
    with pytest.raises(ValueError, match=r"relearn-mlp copy .* non-finite weights .*lower --relearn-lr"):
        score_model(model, tok, plan, settings, LENS)


def test_a_non_finite_model_is_never_scored():
    tok = tiny_tokenizer()
    model = _nan_copy(tiny_llama(tok))
    settings = AuditSettings(families=("formats",), batch_size=4)
    plan = build_plan(items_from_facts(FORGET), pool_from_facts(POOL_FACTS), tok, settings, GENERIC)
    with pytest.raises(ValueError, match="the scored model has non-finite weights"):
        score_model(model, tok, plan, settings, LENS)


def test_an_edit_leaving_non_finite_weights_is_an_error_row(tmp_path):
    ws = _tiny_workspace(tmp_path)
    tok = tiny_tokenizer()

    def prepare(ctx):
        def edit(model, tok, requests, stats):
            original = {"lm_head.weight": model.lm_head.weight.detach().clone()}
            with torch.no_grad():
                model.lm_head.weight.fill_(float("inf"))
            return EditOutcome(original)

        return PreparedMethod("Breaker", edit)

    registry = default_registry()
    registry["Breaker"] = MethodSpec("Breaker", lambda lookup: {"breaker": 1}, prepare)
    config = AuditConfig(hparams=str(ws["hparams"]), data=str(ws["data"]), out=str(tmp_path / "o"), n=2,
                         methods=["base", "Breaker"], settings=AuditSettings(families=("formats",)), progress=False)
    summary = run_audit(config, model=tiny_llama(tok), tok=tok, registry=registry)
    breaker = summary["methods"]["Breaker"]
    assert breaker["status"] == "skipped" and breaker["recovered"] == {} and "non-finite" in breaker["reason"]


# ---- item 4: the audit counts what was audited ---------------------------------------------------------------------

def test_unlearn_audit_with_a_repeated_fact_counts_it_once(tmp_path, capsys):
    ws = _tiny_workspace(tmp_path)
    facts = [FORGET[0], {"prompt": "the capital of japan is", "subject": "japan"}, FORGET[1], dict(FORGET[0])]
    out = tmp_path / "out"
    code = main(["unlearn", "--hparams", str(ws["hparams"]), "--facts", str(_facts(tmp_path, facts)), "--out", str(out),
                 "--save", "none", "--ppl-tokens", "0", "--no-progress", "--audit", "--audit-probes", "formats,choice"])
    assert code == 0
    audit = json.loads((out / REPORT_NAME).read_text())["audit"]
    assert (
        audit["before"]["prompt"]["n"] == 2 and audit["after"]["mc"]["n"] == 2
    )  # france once, germany; japan: no answer
    assert audit["plan"]["n_items"] == 2 and len(audit["plan"]["choice_options"]) == 2


def test_audit_n_larger_than_the_data_reports_the_n_audited(tmp_path, caplog):
    ws = _tiny_workspace(tmp_path)
    tok = tiny_tokenizer()
    config = AuditConfig(hparams=str(ws["hparams"]), data=str(ws["data"]), out=str(tmp_path / "o"), n=100000,
                         methods=["base"], settings=AuditSettings(families=("formats",)), progress=False)
    with caplog.at_level(logging.WARNING):
        summary = run_audit(config, model=tiny_llama(tok), tok=tok)
    assert summary["n"] == 8 and summary["n_requested"] == 100000
    saved = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert saved["n"] == 8 and saved["methods"]["base"]["recovered"]["prompt"]["n"] == 1
    md = (tmp_path / "o" / "audit.md").read_text()
    assert "n = 8" in md and "n = 100000" not in md.splitlines()[0]
    assert "8 audited per seed" in caplog.text


# ---- item 7: the pool has same-relation material and says so --------------------------------------------------------

def _case(
    case_id: str, subject: str, answer: str, template: str = "the capital of {} is", relation=None
) -> UnlearnCase:
    prompt = template.format(subject)
    return UnlearnCase(
        case_id,
        {"prompt": prompt, "subject": subject, "ground_truth": answer},
        forget=[Probe(prompt, answer)],
        paraphrase=[],
        neighbour=[],
        source="counterfact",
        relation=relation,
    )


def test_a_case_without_a_relation_id_gets_its_template():
    items = items_from_cases([_case("0", "france", "paris"), _case("1", "Poland", "Warsaw", "The capital of {}  is")])
    assert items[0].relation == items[1].relation == "the capital of {} is"
    pool = pool_from_cases([_case("2", "italy", "rome")])
    assert pool[0].relation == "the capital of {} is"


def test_the_audit_pool_adds_the_builtin_facts_under_the_datasets_relation_ids():
    from zerounlearn_editor.evaluation.audit.items import audit_pool, builtin_pool

    pool = audit_pool(pool_from_cases([_case("0", "italy", "rome", relation="P36")]), builtin_pool())
    capitals = [f for f in pool if f.prompt.startswith("The capital of")]
    assert len(capitals) == 15 and all(f.relation == "P36" for f in capitals)  # joined the dataset's P36
    assert any(f.relation == "the chemical symbol for {} is" for f in pool)
    assert len({(f.prompt, f.answer) for f in pool}) == len(pool)


def test_template_variants_of_one_relation_are_related():
    from zerounlearn_editor.evaluation.audit.items import audit_pool, borrow, builtin_pool, related

    capital = ["the capital of {} is", "{}'s capital city is", "{}, which has the capital city", "{}'s capital,"]
    assert all(related(a, b) for a in capital for b in capital)
    assert not related("the capital of {} is", "{} is a twin city of")
    assert not related("{}, in", "{} is located in") and related("{}, in", "{}, in")  # prepositions alone: exact only
    assert related("{} is located in", "{} is located in the continent") and not related("P36", "P17")
    assert not related(None, None) and not related("the capital of {} is", "P36")
    # a capital asked as "X's capital city," borrows the built-in "The capital of Y is" facts as same relation
    item = items_from_cases([_case("0", "Scotland", "Edinburgh", "{}'s capital city,")])[0]
    pool = audit_pool(builtin_pool())
    picked = borrow(pool, item.relation, 5, ("scotland", "edinburgh"), 1, "ic")
    assert all(f.prompt.startswith("The capital of") for f in picked)


def test_builtin_facts_only_fill_in_where_the_dataset_is_thin():
    from zerounlearn_editor.evaluation.audit.items import audit_pool, borrow, builtin_pool, relearn_facts

    data = pool_from_cases(
        [
            _case(str(i), s, a, relation="P36")
            for i, (s, a) in enumerate([("italy", "rome"), ("spain", "madrid"), ("japan", "tokyo"), ("egypt", "cairo")])
        ]
    )
    pool = audit_pool(data, builtin_pool())
    item = items_from_cases([_case("9", "france", "paris", relation="P36")])[0]
    for seed in range(5):
        picked = borrow(pool, "P36", 6, ("france", "paris"), seed, "ic")
        assert {f.prompt for f in picked[:4]} == {f.prompt for f in data}  # the dataset's siblings first
        assert all(f.builtin and f.relation == "P36" for f in picked[4:])  # then built-in capitals
        relearn = relearn_facts([item], pool, 6, ("france", "paris"), seed)
        assert {f.prompt for f in relearn[:4]} == {f.prompt for f in data} and all(f.builtin for f in relearn[4:])
    # a pool without built-in facts draws exactly as before (same seeded order)
    assert borrow(data, "P36", 3, (), 1, "ic") == borrow(audit_pool(data), "P36", 3, (), 1, "ic")


def test_thin_dataset_pool_borrows_same_relation_builtin_facts(tmp_path, caplog):
    """Twenty capitals with no relation id, all forgotten: the dataset itself has no capital left to borrow."""
    ws = _tiny_workspace(tmp_path)
    tok = tiny_tokenizer()
    config = AuditConfig(hparams=str(ws["hparams"]), data=str(ws["data"]), out=str(tmp_path / "o"), n=8,
                         methods=["base"], settings=AuditSettings(families=("in_context", "choice", "relearning"),
                                                                  relearn_steps=1, relearn_scopes=("mlp",)),
                         progress=False)
    run_audit(config, model=tiny_llama(tok), tok=tok)
    record = json.loads((tmp_path / "o" / "audit_seed_1.json").read_text())
    plan = record["plan"]
    # every fact of the file is forgotten: all in-context examples, distractors and relearning facts are
    # built-in capitals (English, capitalised), none names a forgotten country or capital
    assert plan["same_relation"] == {"ic1": 8, "ic3": 8, "ic5": 8, "mc": 8, "relearn": 8}
    for examples in plan["in_context"]["3"]:
        assert all(e.startswith("The capital of") for e in examples)
    # the 8 built-in capitals naming no forgotten country or capital come first, then other facts up to 32
    capitals = [f for f in plan["relearn_facts"] if f.startswith("The capital of")]
    assert len(capitals) == 8 and plan["relearn_facts"][:8] == capitals
    assert record["methods"]["base"]["probes"]["ic3"]["same_relation"] == 8
    summary = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert summary["same_relation"]["mc"] == {"items": 8, "of": 8}
    assert "Same-relation material" in (tmp_path / "o" / "audit.md").read_text()
    assert "same-relation material" not in caplog.text


def test_fewer_than_half_with_same_relation_material_is_a_warning(caplog):
    tok = tiny_tokenizer()
    items = items_from_facts(
        [
            {"prompt": "the old city in france is", "subject": "france", "answer": "paris"},
            {"prompt": "the capital of germany is", "subject": "germany", "answer": "berlin"},
            {"prompt": "many people live in japan and the city is", "subject": "japan", "answer": "tokyo"},
        ]
    )
    settings = AuditSettings(families=("in_context", "choice", "relearning"), shots=(1,), relearn_n=3)
    with caplog.at_level(logging.WARNING):
        plan = build_plan(items, pool_from_facts(POOL_FACTS), tok, settings, GENERIC)
    assert plan.same_relation == {"ic1": 1, "mc": 1, "relearn": 1}  # only germany's relation is in the pool
    for probe in ("ic1", "mc", "relearn"):
        assert f"only 1 of 3 facts got same-relation material for the {probe} probe" in caplog.text


def test_a_probe_the_unedited_model_cannot_pass_is_flagged_uninformative(tmp_path):
    ws = _tiny_workspace(tmp_path)
    tok = tiny_tokenizer()
    config = AuditConfig(hparams=str(ws["hparams"]), data=str(ws["data"]), out=str(tmp_path / "o"), n=3,
                         methods=["base"], settings=AuditSettings(families=("formats",)), progress=False)
    summary = run_audit(config, model=tiny_llama(tok), tok=tok)  # a random tiny model recovers nothing
    base = summary["methods"]["base"]["recovered"]
    assert (
        summary["uninformative"] == [p for p in base if base[p]["mean"] <= 5.0] and "prompt" in summary["uninformative"]
    )
    assert "Uninformative probes" in (tmp_path / "o" / "audit.md").read_text()

    from zerounlearn_editor.evaluation.audit.facts_audit import format_facts_audit

    table = format_facts_audit({"before": {"prompt": {"recovered": 0.0, "n": 2}, "mc": {"recovered": 50.0, "n": 2,
                                                                                         "same_relation": 1}},
                                "after": {"prompt": {"recovered": 0.0}, "mc": {"recovered": 0.0}}})
    assert "| prompt | 0 | 0 |  | uninformative (unedited ~0) |" in table and "| mc | 50 | 0 | 1/2 |  |" in table


# ---- item 9: in-context prompts longer than GPT-2's positions ------------------------------------------------------

def test_in_context_prompts_beyond_gpt2_positions_are_refused_before_scoring(tmp_path, caplog, monkeypatch):
    ws = _tiny_workspace(tmp_path, gpt2=True)
    long_facts = [
        {
            "prompt": "the capital of france is " + "a city in and it was known for its river " * 10 + "and",
            "subject": "france",
            "answer": "paris",
        }
    ] + [
        {"prompt": f"the capital of {s} is", "subject": s, "answer": a}
        for s, a in [("spain", "madrid"), ("japan", "tokyo")]
    ]
    retain = tmp_path / "keep.json"  # long borrowable facts: five of them fill GPT-2's 128 positions
    retain.write_text(
        json.dumps(
            [
                {
                    "prompt": f"the capital of {s} is " + "many people live there and " * 5 + "its city is",
                    "subject": s,
                    "answer": a,
                }
                for s, a in [("italy", "rome"), ("egypt", "cairo"), ("england", "london"), ("russia", "moscow")]
            ]
        )
    )
    scored: List[int] = []
    monkeypatch.setattr("zerounlearn_editor.applications.unlearn.evaluate_probes",
                        lambda *a, **k: scored.append(1) or {"acc": [], "prob": []})
    code = main(["unlearn", "--hparams", str(ws["hparams"]), "--facts", str(_facts(tmp_path, long_facts)), "--save",
                 "none", "--ppl-tokens", "0", "--no-progress", "--audit", "--audit-probes", "in_context",
                 "--audit-shots", "5"])
    assert code == 2 and not scored
    assert "audit: fact 0 ('the capital of france is a city" in caplog.text
    assert "ic5 probe needs" in caplog.text and "more than the model's 128; lower --shots" in caplog.text


# ---- item 12: no generic text left, refused in the plan before any work --------------------------------------------

def test_unlearn_audit_without_generic_text_is_refused_before_loading(tmp_path, caplog, no_model_load):
    ws = _tiny_workspace(tmp_path)
    facts = [FORGET[0], {"prompt": "a city in spain is", "subject": "a", "answer": "madrid"}]
    code = main(["unlearn", "--hparams", str(ws["hparams"]), "--facts", str(_facts(tmp_path, facts)), "--save", "none",
                 "--no-progress", "--audit"])
    assert code == 2
    assert "no generic text is left" in caplog.text and "subject 'a' of fact 1 (in 30 of 30)" in caplog.text
    assert "leave relearning out of the probes" in caplog.text


# ---- item 15: options that would be silently ignored or empty ------------------------------------------------------

def test_rwku_probes_on_data_without_rwku_levels_are_an_error(tmp_path, caplog, no_model_load):
    ws = _tiny_workspace(tmp_path)
    code = main(["audit", "--hparams", str(ws["hparams"]), "--data", str(ws["data"]), "--out", str(tmp_path / "o"),
                 "--n", "2", "--no-progress", "--methods", "base", "--probes", "formats,rwku"])
    assert code == 2 and "rwku asked for, but none of the 8 facts has RWKU probe levels" in caplog.text
    caplog.clear()
    code = main(["unlearn", "--hparams", str(ws["hparams"]), "--facts", str(_facts(tmp_path, FORGET)), "--save", "none",
                 "--no-progress", "--audit", "--audit-probes", "rwku"])
    assert code == 2 and "rwku asked for" in caplog.text
    caplog.clear()
    code = main(["bench", "--hparams", str(ws["hparams"]), "--data", str(ws["data"]), "--out", str(tmp_path / "b"),
                 "--n", "2", "--seeds", "1", "--methods", "base", "--no-progress", "--audit", "--audit-probes", "rwku"])
    assert code == 2 and "rwku asked for" in caplog.text


@pytest.mark.parametrize("option", [["--audit-shots", "3"], ["--audit-probes", "lens"], ["--audit-relearn-lr", "0.01"]])
@pytest.mark.parametrize("command", ["unlearn", "bench"])
def test_audit_options_without_audit_are_an_error(tmp_path, caplog, no_model_load, command, option):
    ws = _tiny_workspace(tmp_path)
    args = _command_args(command, tmp_path, ws)
    code = main([*args, "--hparams", str(ws["hparams"]), "--no-progress", *option])
    assert code == 2 and f"{option[0]} given without --audit" in caplog.text


def test_more_shots_than_borrowable_facts_are_capped_and_labelled(caplog):
    tok = tiny_tokenizer()
    settings = AuditSettings(families=("in_context", "lens"), shots=(1, 3, 50), lens_shots=40)
    with caplog.at_level(logging.WARNING):
        plan = build_plan(items_from_facts(FORGET), pool_from_facts(POOL_FACTS), tok, settings, GENERIC)
    assert plan.shots == (1, 3, 5) and plan.lens_shots == 5
    assert probe_columns(plan, settings) == ["ic1", "ic3", "ic5", "lens:prompt", "lens:paraphrase", "lens:ic5"]
    assert all(len(ex) == 5 for ex in plan.in_context_examples[5])
    assert "50 in-context examples asked for, but only 5 facts can be borrowed" in caplog.text
    assert "the column is ic5" in caplog.text
    results = score_model(tiny_llama(tok), tok, plan, settings, LENS)
    assert "ic50" not in results and results["ic5"]["n"] == 2
