"""The robustness audit (``zerounlearn audit``) on tiny models: probe maths, borrowing rules, copies, runner."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest
import torch
import yaml
from torch import nn

from tiny_models import (
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    with_head_bias,
    write_corpus,
    write_tiny_counterfact,
)
from zerounlearn_editor.evaluation.audit import (
    AuditSettings,
    LensConfig,
    build_plan,
    items_from_facts,
    parse_families,
    pool_from_facts,
    probe_columns,
    score_model,
)
from zerounlearn_editor.evaluation.audit.items import borrow, distractors, forbidden_of, relearn_facts
from zerounlearn_editor.evaluation.audit.lens import best_ranks
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES, quantize_rtn, quantized_copy
from zerounlearn_editor.evaluation.audit.relearn import generic_texts, relearned_copy
from zerounlearn_editor.harness import (
    BenchConfigError,
    EditOutcome,
    MethodSpec,
    ModelFingerprint,
    PreparedMethod,
    default_registry,
)
from zerounlearn_editor.harness.audit import AuditConfig, audit_seed_path, run_audit

LENS = LensConfig(1, "model.layers.{}", "model.norm")
CHAT = ("{% for m in messages %}[BOS] {{ m['content'] }} [EOS]{% endfor %}"
        "{% if add_generation_prompt %} [BOS] {% endif %}")
FORGET = [
    {"prompt": "the capital of france is", "subject": "france", "answer": "paris",
     "paraphrases": ["the capital city of france is"], "questions": ["the capital of france is which city ?"]},
    {"prompt": "the old city in france is", "subject": "france", "answer": "paris"},
]
POOL_FACTS = [(f"the capital of {s} is", s, a) for s, a in
              [("germany", "berlin"), ("italy", "rome"), ("spain", "madrid"), ("japan", "tokyo"), ("egypt", "cairo"),
               ("england", "london")]]
GENERIC = ["many people live in london and it was known for its river",
           "the river in rome is old and the city is large", "tokyo is in asia and many people live there"] * 4


@pytest.fixture(scope="module")
def tok():
    tok = tiny_tokenizer()
    tok.chat_template = CHAT
    return tok


def biased_model(tok, token: str, bias: float) -> nn.Module:
    """A tiny Llama whose head adds ``bias`` to ``token``'s logit: +large = says it after any context,
    -large = the token is removed from the head (the model can never say it)."""
    return with_head_bias(tok, tiny_llama(tok), token, bias)


def _plan(tok, **changes):
    settings = AuditSettings(relearn_n=4, batch_size=4, **changes)
    return build_plan(items_from_facts(FORGET), pool_from_facts(POOL_FACTS), tok, settings, GENERIC), settings


def test_a_model_that_says_the_answer_recovers_everything(tok):
    plan, settings = _plan(tok)
    model = biased_model(tok, "paris", 40.0)
    results = score_model(model, tok, plan, settings, LENS)
    assert list(results) == probe_columns(plan, settings)
    expected = {"prompt", "paraphrase", "question", "chat", "ic1", "ic3", "ic5", "mc", "lens:prompt", "lens:ic3",
                "int8:prompt", "int4g16:ic3", "relearn-mlp", "relearn-full", "generic-mlp", "generic-full",
                "rtt-mlp", "rtt-full"}
    assert expected <= set(results)
    for name, result in results.items():
        probed = result["n_probed"]
        if name.startswith("rtt-"):  # measured on the held-out half only: one of the two facts
            assert result["n"] == probed == 1 and result["recovered"] == 100.0, name
            continue
        # the second fact has no paraphrase: the denominator is every forgotten fact
        assert result["recovered"] == pytest.approx(100.0 * probed / 2), name
        assert probed == (1 if name.endswith("paraphrase") else 2), name


def test_a_model_without_the_answer_token_recovers_nothing(tok):
    plan, settings = _plan(tok)
    model = biased_model(tok, "paris", -1e4)
    results = score_model(model, tok, plan, settings, LENS)
    assert all(r["recovered"] == 0.0 for r in results.values()), {k: r["recovered"] for k, r in results.items()}
    assert all(rank > 10 for rank in results["lens:prompt"]["best_ranks"])


def test_borrowed_facts_never_name_a_forgotten_subject_or_answer(tok):
    items = items_from_facts(FORGET)
    leaky = POOL_FACTS + [
        ("the capital of france was", "france", "lyon"),
        ("the city of paris is in", "paris", "europe"),
        ("the capital of gaul is", "gaul", "paris"),
    ]
    pool = pool_from_facts(leaky)
    forbidden = forbidden_of(items)
    for seed in range(5):
        for k in (1, 3, 5, 9):
            for item in items:
                for fact in borrow(pool, item.relation, k, forbidden, seed, "t"):
                    text = f"{fact.prompt} {fact.answer}"
                    assert "france" not in text and "paris" not in text
            for item in items:
                assert not {"paris", "lyon", "europe"} & set(distractors(item, pool, 3, forbidden, seed))
        for fact in relearn_facts(items, pool, 10, forbidden, seed):
            assert "france" not in fact.prompt and "paris" not in fact.answer
    plan = build_plan(items, pool, tok, AuditSettings(relearn_n=4), GENERIC + ["the city of paris is a large city"])
    for k, per_item in plan.in_context_examples.items():
        for item, examples in zip(items, per_item):
            assert len(examples) == min(k, len(POOL_FACTS))
            assert all(e.relation == "the capital of {} is" for e in examples[:len(POOL_FACTS)])
    assert all("paris" not in t for t in plan.generic)
    # same relation first: the first item's examples are capitals
    assert plan.in_context_examples[3][0][0].prompt.startswith("the capital of")


def test_quantize_rtn_maths():
    torch.manual_seed(0)
    w = torch.randn(6, 32)
    for bits, group in ((8, None), (4, None), (4, 16)):
        q = quantize_rtn(w, bits, group)
        top = 2 ** (bits - 1) - 1
        blocks = w.reshape(6, -1, group or 32)
        scale = blocks.abs().amax(-1, keepdim=True) / top
        err = (q.reshape(blocks.shape) - blocks).abs()
        assert (err <= scale / 2 + 1e-6).all()  # round to nearest
        levels = torch.round(q.reshape(blocks.shape) / scale)
        assert levels.abs().max() <= top + 1e-4 and torch.allclose(levels, levels.round(), atol=1e-4)
    assert quantize_rtn(w, 8).shape == w.shape
    with pytest.raises(ValueError, match="group_size"):
        quantize_rtn(w, 4, 5)


def test_quantized_copy_leaves_the_model_and_head_alone(tok):
    model = tiny_llama(tok)
    before = ModelFingerprint.of(model)
    twin = quantized_copy(model, QUANT_SCHEMES["int4"])
    assert before.differences(model) == []
    diff = set(before.differences(twin))
    assert "lm_head.weight" not in diff and "model.embed_tokens.weight" not in diff
    assert "model.layers.0.mlp.down_proj.weight" in diff and "model.layers.1.self_attn.q_proj.weight" in diff


def test_relearning_changes_only_its_scope_and_never_the_callers_model(tok):
    model = tiny_llama(tok)
    before = ModelFingerprint.of(model)
    pairs = [("the capital of germany is", "berlin"), ("the capital of italy is", "rome")]
    mlp = relearned_copy(model, tok, "mlp", 3, 1e-3, pairs=pairs)
    assert before.differences(model) == []
    changed = set(before.differences(mlp))
    assert changed and all(".mlp." in name for name in changed)
    full = relearned_copy(model, tok, "full", 3, 1e-3, texts=GENERIC[:3])
    assert any(".self_attn." in name for name in before.differences(full))
    assert before.differences(model) == []
    assert not any(p.requires_grad for p in mlp.parameters())
    # the control's texts carry no forgotten word
    assert generic_texts(["paris is large", "rome is old", "a b c d"], 5, 3, ("paris",)) == ["rome is old", "a b c"]
    with pytest.raises(ValueError, match="either"):
        relearned_copy(model, tok, "mlp", 1, 1e-3)


def test_lens_at_the_last_layer_is_the_models_own_ranking(tok):
    model = tiny_llama(tok)
    from zerounlearn_editor.data.types import Probe

    probes = [Probe("the capital of france is", "paris"), Probe("many people live in", "london")]
    ranks = best_ranks(model, tok, probes, 3, "model.layers.{}", "model.norm")
    for probe, rank in zip(probes, ranks):
        ids = tok(probe.prompt, return_tensors="pt")["input_ids"]
        logits = model(input_ids=ids).logits[0, -1]
        answer = tok.convert_tokens_to_ids(probe.answer)
        assert rank == int((logits > logits[answer]).sum())
    all_layers = best_ranks(model, tok, probes, 0, "model.layers.{}", "model.norm")
    assert all(a <= r for a, r in zip(all_layers, ranks))


def test_parse_families_and_settings_errors():
    assert parse_families("all")[0] == "formats"
    assert parse_families("lens,choice") == ("lens", "choice")
    with pytest.raises(ValueError, match="unknown famil"):
        parse_families("lens,telepathy")
    with pytest.raises(ValueError, match="quantization"):
        AuditSettings(quant_schemes=("int3",)).validate()
    with pytest.raises(ValueError, match="scope"):
        AuditSettings(relearn_scopes=("attention",)).validate()


# ---- runner ---------------------------------------------------------------------------------------------------------

def _workspace(tmp_path: Path) -> Dict[str, Path]:
    data = write_tiny_counterfact(tmp_path / "cf.json")
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    main = tmp_path / "hparams" / "ZeroUnlearn" / "tiny.yaml"
    main.parent.mkdir(parents=True)
    main.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", corpus)), encoding="utf-8")
    return {"data": data, "main": main}


def _silencer(calls: List[str]) -> MethodSpec:
    """A method that removes every forgotten answer from the head (and restores it through weights_copy)."""

    def prepare(ctx):
        def edit(model, tok, requests, stats):
            calls.append("edit")
            original = {"lm_head.bias": model.lm_head.bias.detach().clone()}
            with torch.no_grad():
                for request in requests:
                    model.lm_head.bias[tok.convert_tokens_to_ids(request["ground_truth"])] = -1e4
            return EditOutcome(original)

        return PreparedMethod("Silencer", edit)

    return MethodSpec("Silencer", lambda lookup: {"silencer": 1}, prepare)


def test_run_audit_end_to_end_and_resume(tok, tmp_path):
    ws = _workspace(tmp_path)
    calls: List[str] = []
    registry = default_registry()
    registry["Silencer"] = _silencer(calls)
    model = biased_model(tok, "paris", 0.0)  # a head with a bias the method can silence
    before = ModelFingerprint.of(model)
    settings = AuditSettings(families=("formats", "in_context", "choice", "lens", "relearning"), relearn_steps=2,
                             relearn_n=3, relearn_scopes=("mlp",))
    out = tmp_path / "out"
    config = AuditConfig(hparams=str(ws["main"]), data=str(ws["data"]), out=str(out), seeds=[1, 2], n=2,
                         methods=["base", "Silencer"], settings=settings, progress=False)
    summary = run_audit(config, model=model, tok=tok, registry=registry)
    assert before.differences(model) == []
    assert calls == ["edit", "edit"]
    for name in ("audit.json", "audit.md", "audit.png", "audit_seed_1.json", "audit_seed_2.json"):
        assert (out / name).is_file(), name
    silenced = summary["methods"]["Silencer"]["recovered"]
    assert silenced["prompt"]["mean"] == 0.0 and silenced["relearn-mlp"]["mean"] == 0.0
    record = json.loads(audit_seed_path(out, 1).read_text())
    assert record["methods"]["base"]["status"] == "ok" and "in_context" in record["plan"]
    assert "| Silencer |" in (out / "audit.md").read_text()
    # resume: nothing left to do, the model is not even needed
    again = run_audit(config, model=None, tok=None, registry=registry, loader=_no_loader)
    assert calls == ["edit", "edit"] and again["table_markdown"] == summary["table_markdown"]
    # another setting on the same folder is refused, naming it
    other = AuditConfig(**{**config.__dict__, "settings": AuditSettings(families=("formats",))})
    with pytest.raises(BenchConfigError, match="settings"):
        run_audit(other, model=model, tok=tok, registry=registry)


def _no_loader(name, device):
    raise AssertionError("the model must not be loaded")


def test_cli_audit_refuses_bad_options_before_loading(tmp_path, capsys):
    from zerounlearn_editor.cli import main

    ws = _workspace(tmp_path)
    code = main(["audit", "--hparams", str(ws["main"]), "--data", str(ws["data"]), "--out", str(tmp_path / "o"),
                 "--probes", "formats,telepathy"])
    assert code == 2
    code = main(["audit", "--hparams", str(ws["main"]), "--data", str(ws["data"]), "--out", str(tmp_path / "o"),
                 "--methods", "base,ZeroUnlearn+R"])
    assert code == 2
    assert not (tmp_path / "o").exists()


def test_bench_audit_columns(tok, tmp_path):
    from zerounlearn_editor.harness import BenchConfig, run_bench

    ws = _workspace(tmp_path)
    calls: List[str] = []
    registry = default_registry()
    registry["Silencer"] = _silencer(calls)
    model = biased_model(tok, "paris", 0.0)
    config = BenchConfig(hparams=str(ws["main"]), data=str(ws["data"]), seeds=[1], methods=["base", "Silencer"],
                         out=str(tmp_path / "bench"), n=3, ppl_tokens=0, progress=False,
                         audit=AuditSettings(families=("formats", "choice")))
    summary = run_bench(config, model=model, tok=tok, registry=registry)
    silenced = summary["methods"]["Silencer"]["metrics"]
    assert silenced["audit:prompt"]["mean"] == 0.0 and silenced["audit:mc"]["mean"] == 0.0
    base = summary["methods"]["base"]["metrics"]
    assert set(base) >= {"audit:prompt", "audit:paraphrase", "audit:question", "audit:mc"}
    assert "prompt ↓" in summary["table_markdown"] and "mc ↓" in summary["table_markdown"]
    assert summary["run"]["audit"]["families"] == ["formats", "choice"]
    with pytest.raises(BenchConfigError, match="unknown probe family"):
        run_bench(
            BenchConfig(**{**config.__dict__, "audit": AuditSettings(families=("telepathy",))}),
            model=model,
            tok=tok,
            registry=registry,
        )


def test_dataset_cases_give_questions_and_rwku_levels(tok):
    from zerounlearn_editor.data.types import Probe, UnlearnCase
    from zerounlearn_editor.evaluation.audit import items_from_cases, pool_from_cases

    rwku = UnlearnCase(
        "stephen king",
        {"prompt": "stephen king wrote", "subject": "stephen king", "ground_truth": "carrie"},
        forget=[],
        paraphrase=[],
        neighbour=[],
        source="rwku",
        probe_groups={
            "forget_level1": [Probe("stephen king wrote", "carrie")],
            "forget_level2": [Probe("what did stephen king write first ?", "carrie")],
            "forget_level3": [Probe("pretend you are a librarian : king's debut was", "carrie")],
            "neighbor_level1": [Probe("maine is in", "usa")],
        },
    )
    mquake = UnlearnCase(
        "1:hop0",
        {"prompt": "hey jude was performed by", "subject": "hey jude", "ground_truth": "beatles"},
        forget=[],
        paraphrase=[Probe("who performed hey jude ?", "beatles")],
        neighbour=[],
        source="mquake",
    )
    items = items_from_cases([rwku, mquake])
    assert [q.prompt for q in items[0].questions] == ["what did stephen king write first ?"]
    assert set(items[0].groups) == {"fill_in_blank", "question", "adversarial"} and not items[0].paraphrases
    assert items[1].questions == items[1].paraphrases == (Probe("who performed hey jude ?", "beatles"),)
    pool = pool_from_facts(POOL_FACTS) + pool_from_cases([rwku])
    plan = build_plan(items, pool, tok, AuditSettings(families=("formats", "rwku")))
    assert plan.text_probes["question"][1] == [Probe("Q: who performed hey jude ? A:", "beatles")]
    assert [c for c in probe_columns(plan, AuditSettings(families=("formats", "rwku"))) if c.startswith("rwku")] == \
        ["rwku_fill_in_blank", "rwku_question", "rwku_adversarial"]
    assert plan.text_probes["rwku_question"][1] == []  # the MQuAKE fact has no RWKU level


def test_audit_runs_the_bench_methods(tok, tmp_path):
    """ZeroUnlearn-GD and GA through the bench's registry, hparams lookup and C0 statistics."""
    ws = _workspace(tmp_path)
    root = ws["main"].parent.parent
    gd = tiny_hparams_dict(tmp_path / "stats", tmp_path / "corpus.jsonl", alg_name="ZeroUnlearn-GD")
    (root / "ZeroUnlearn-GD").mkdir()
    (root / "ZeroUnlearn-GD" / "tiny.yaml").write_text(yaml.safe_dump(gd), encoding="utf-8")
    (root / "GA").mkdir()
    (root / "GA" / "tiny.yaml").write_text(
        yaml.safe_dump(dict(alg_name="GA", model_name="tiny", device="cpu", layers=[1, 2], num_steps=2, lr=1e-2)),
        encoding="utf-8",
    )
    model = tiny_llama(tok)
    before = ModelFingerprint.of(model)
    config = AuditConfig(hparams=str(ws["main"]), data=str(ws["data"]), out=str(tmp_path / "out"), seeds=[3], n=2,
                         methods=["base", "ZeroUnlearn-GD", "GA"], settings=AuditSettings(families=("formats", "lens")),
                         progress=False)
    summary = run_audit(config, model=model, tok=tok)
    assert before.differences(model) == []
    record = json.loads(audit_seed_path(tmp_path / "out", 3).read_text())
    assert record["methods"]["ZeroUnlearn-GD"]["status"] == "ok" and record["methods"]["GA"]["status"] == "ok"
    assert any("down_proj" in p for p in record["methods"]["ZeroUnlearn-GD"]["edited_parameters"])
    assert set(summary["methods"]["GA"]["recovered"]) == set(summary["methods"]["base"]["recovered"])


# ---- relearning measured against the unedited model (``<probe>/kept``) ----------------------------------------------

def test_kept_by_base_counts_only_the_facts_the_fine_tuned_base_still_answers():
    from zerounlearn_editor.harness.audit_report import kept_by_base

    base = {
        "relearn-mlp": {"items": [1, 0, 1, 1]},
        "generic-mlp": {"items": [0, 0, 0, 0]},
        "prompt": {"items": [1] * 4},
    }
    edited = {
        "relearn-mlp": {"items": [1, 1, 0, 0]},
        "generic-mlp": {"items": [1, 1, 1, 1]},
        "prompt": {"items": [0] * 4},
    }
    kept = kept_by_base(edited, base)
    assert set(kept) == {"relearn-mlp/kept", "generic-mlp/kept"}  # only the fine-tuning probes
    # facts 0, 2, 3 survive the base fine-tune; the edited model answers fact 0 of them (fact 1 does not count)
    assert kept["relearn-mlp/kept"]["recovered"] == pytest.approx(100.0 / 3) and kept["relearn-mlp/kept"]["n"] == 3
    assert kept["generic-mlp/kept"]["recovered"] is None and kept["generic-mlp/kept"]["n"] == 0
    assert kept_by_base(edited, None) == {}
    with pytest.raises(ValueError, match="base row"):
        kept_by_base({"relearn-mlp": {"items": [1, 0]}}, base)


def _no_op() -> MethodSpec:
    """A method that changes nothing (its rows must equal the base row's)."""

    def prepare(ctx):
        return PreparedMethod("NoOp", lambda model, tok, requests, stats: EditOutcome({}))

    return MethodSpec("NoOp", lambda lookup: {"no-op": 1}, prepare)


def test_run_audit_relearning_against_the_base_row(tok, tmp_path):
    """On a tiny Llama: a method that edits nothing gets /kept = 100 whatever the fine-tune does to the base,
    a method that removes the answer from the head (out of the MLP's reach) gets 0."""
    from tiny_models import TINY_FACTS, tiny_counterfact_record

    ws = _workspace(tmp_path)
    # four subjects answer "paris" (the biased model knows exactly those), the others lend the relearning facts
    records = [tiny_counterfact_record(i, s, "paris" if i < 4 else a) for i, (s, a) in enumerate(TINY_FACTS)]
    data = tmp_path / "cf_paris.json"
    data.write_text(json.dumps(records), encoding="utf-8")
    registry = default_registry()
    registry["Silencer"] = _silencer([])
    registry["NoOp"] = _no_op()
    model = biased_model(tok, "paris", 8.0)  # answers "paris" everywhere, so the base keeps it after fine-tuning
    settings = AuditSettings(families=("formats", "relearning"), relearn_steps=2, relearn_n=3, relearn_scopes=("mlp",))
    config = AuditConfig(hparams=str(ws["main"]), data=str(data), out=str(tmp_path / "out"), seeds=[1], n=2,
                         methods=["base", "NoOp", "Silencer"], settings=settings, known_only=True, progress=False)
    summary = run_audit(config, model=model, tok=tok, registry=registry)
    rows = summary["methods"]
    record = json.loads(audit_seed_path(tmp_path / "out", 1).read_text())
    base_items = record["methods"]["base"]["probes"]["relearn-mlp"]["items"]
    assert record["methods"]["NoOp"]["probes"]["relearn-mlp"]["items"] == base_items  # same plan, same fine-tune
    kept_facts = sum(base_items)
    assert kept_facts > 0, "the biased model must keep some answers for the test to mean anything"
    assert rows["base"]["recovered"]["relearn-mlp/kept"]["mean"] == 100.0
    assert rows["NoOp"]["recovered"]["relearn-mlp/kept"]["mean"] == 100.0
    assert rows["Silencer"]["recovered"]["relearn-mlp/kept"]["mean"] == 0.0
    assert rows["Silencer"]["kept_facts"]["relearn-mlp/kept"] == kept_facts
    assert "| relearn-mlp | relearn-mlp/kept |" in (tmp_path / "out" / "audit.md").read_text()
