"""The audit's ``rtt`` probe: fine-tune on half of the forgotten facts, measure the other half (RTT's split)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import yaml

from tiny_models import (
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    with_head_bias,
    write_corpus,
    write_tiny_counterfact,
)
from zerounlearn_editor.cli import main
from zerounlearn_editor.evaluation.audit import (
    FAMILIES,
    AuditError,
    AuditSettings,
    LensConfig,
    build_plan,
    items_from_facts,
    pool_from_facts,
    probe_columns,
    score_model,
)
from zerounlearn_editor.evaluation.audit import suite as suite_module
from zerounlearn_editor.evaluation.audit.items import rtt_split
from zerounlearn_editor.evaluation.audit.plan import check_audit_inputs
from zerounlearn_editor.harness.audit import AuditConfig
from zerounlearn_editor.harness.audit_report import write_audit_summary
from zerounlearn_editor.harness.bench_config import BenchConfig, BenchConfigError
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint

LENS = LensConfig(1, "model.layers.{}", "model.norm")
FORGET = [{"prompt": f"the capital of {s} is", "subject": s, "answer": a}
          for s, a in [("france", "paris"), ("germany", "berlin"), ("italy", "rome"), ("spain", "madrid"),
                       ("japan", "tokyo")]]
POOL = [("the capital of egypt is", "egypt", "cairo"), ("the capital of russia is", "russia", "moscow")]
RTT_ONLY = AuditSettings(families=("rtt",), relearn_steps=2, relearn_lr=1e-3, batch_size=4)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _plan(tok, settings=RTT_ONLY, facts=FORGET):
    return build_plan(items_from_facts(facts), pool_from_facts(POOL), tok, settings)


def test_the_split_is_disjoint_covers_the_facts_and_is_seeded():
    for n in range(2, 10):
        splits = set()
        for seed in range(6):
            trained, held_out = rtt_split(n, seed)
            assert len(trained) == n // 2 and len(held_out) == n - n // 2
            assert not set(trained) & set(held_out) and sorted(trained + held_out) == list(range(n))
            assert rtt_split(n, seed) == (trained, held_out)  # deterministic
            splits.add(tuple(trained))
        if n >= 4:
            assert len(splits) > 1  # the seed draws the split
    with pytest.raises(ValueError, match="at least 2"):
        rtt_split(1, 0)


def test_the_plan_records_the_split(tok):
    for seed in (0, 3):
        plan = _plan(tok, AuditSettings(families=("rtt",), seed=seed))
        trained, held_out = rtt_split(len(FORGET), seed)
        assert (plan.rtt_trained, plan.rtt_held_out) == (trained, held_out)
        described = json.loads(json.dumps(plan.describe()))["rtt"]
        assert described == {"trained": [str(i) for i in trained], "held_out": [str(i) for i in held_out],
                             "held_out_sharing_an_answer": 0}
    shared = FORGET[:3] + [{"prompt": "the old city in france is", "subject": "france", "answer": "paris"}]
    plan = _plan(tok, AuditSettings(families=("rtt",), seed=0), shared)
    answers = {plan.items[i].answer for i in plan.rtt_trained}
    expected = sum(1 for i in plan.rtt_held_out if plan.items[i].answer in answers)
    assert plan.describe()["rtt"]["held_out_sharing_an_answer"] == expected


def test_rtt_fine_tunes_on_the_trained_half_and_measures_only_the_held_out_half(tok, monkeypatch):
    plan = _plan(tok)
    trained = [plan.items[i] for i in plan.rtt_trained]
    held_out = [plan.items[i] for i in plan.rtt_held_out]
    calls = []
    for target, expected_flags in ((trained[0].answer, [0] * len(held_out)),
                                   (held_out[1].answer, [int(i == 1) for i in range(len(held_out))])):
        def fake_copy(model, tok_, scope, steps, lr, pairs=(), texts=(), _target=target):
            calls.append((scope, steps, lr, list(pairs), list(texts)))
            return with_head_bias(tok, tiny_llama(tok), _target)

        monkeypatch.setattr(suite_module, "relearned_copy", fake_copy)
        results = score_model(tiny_llama(tok), tok, plan, RTT_ONLY, LENS)
        assert list(results) == ["rtt-mlp", "rtt-full"] == probe_columns(plan, RTT_ONLY)
        for result in results.values():
            assert result["items"] == expected_flags and result["n"] == len(held_out) == 3
            assert result["recovered"] == pytest.approx(100.0 * sum(expected_flags) / len(held_out))
            assert result["held_out"] == [i.case_id for i in held_out]
    assert [c[0] for c in calls] == ["mlp", "full"] * 2
    for _, steps, lr, pairs, texts in calls:
        assert (steps, lr, texts) == (2, 1e-3, [])
        assert pairs == [(i.prompt, i.answer) for i in trained]
        assert not {p for p, _ in pairs} & {i.prompt for i in held_out}


def test_rtt_full_moves_non_mlp_weights_mlp_does_not_and_the_model_is_left_alone(tok, monkeypatch):
    model = tiny_llama(tok)
    before = ModelFingerprint.of(model)
    twins = {}
    real = suite_module.relearned_copy

    def keep(model_, tok_, scope, *args, **kwargs):
        twins[scope] = real(model_, tok_, scope, *args, **kwargs)
        return twins[scope]

    monkeypatch.setattr(suite_module, "relearned_copy", keep)
    results = score_model(model, tok, _plan(tok), RTT_ONLY, LENS)
    assert set(results) == {"rtt-mlp", "rtt-full"}
    assert before.differences(model) == []
    mlp, full = (set(before.differences(twins[s])) for s in ("mlp", "full"))
    assert mlp and all(".mlp." in name for name in mlp)
    assert any(".self_attn." in name for name in full) and mlp < full


def test_rtt_needs_two_facts_when_asked_for(tok, caplog):
    one = items_from_facts(FORGET[:1])
    with pytest.raises(AuditError, match=r"rtt asked for.*at least 2 forgotten facts.*got 1.*--probes"):
        check_audit_inputs(one, pool_from_facts(POOL), RTT_ONLY)
    with pytest.raises(BenchConfigError, match=r"rtt asked for.*at least 2 forgotten facts.*got 1.*--n"):
        AuditConfig(hparams="h.yaml", data="d", out="o", n=1, settings=RTT_ONLY).validate()
    AuditConfig(hparams="h.yaml", data="d", out="o", n=2, settings=RTT_ONLY).validate()
    with pytest.raises(BenchConfigError, match=r"rtt asked for.*got 1"):
        BenchConfig(hparams="h.yaml", data="d", seeds=[1], methods=["base"], out="o", n=1, audit=RTT_ONLY).validate()
    BenchConfig(hparams="h.yaml", data="d", seeds=[1], methods=["base"], out="o", n=2, audit=RTT_ONLY).validate()
    # through ``all`` one fact leaves the rtt columns out, with a warning
    settings = AuditSettings(families=FAMILIES, relearn_n=2, batch_size=4)
    with caplog.at_level(logging.WARNING):
        plan = build_plan(one, pool_from_facts(POOL), tok, settings, ["many people live in london"])
    assert not any(c.startswith("rtt-") for c in probe_columns(plan, settings)) and "rtt" not in plan.describe()
    assert "rtt probe needs at least 2 forgotten facts" in caplog.text


def test_audit_command_refuses_rtt_on_one_fact_before_loading(tmp_path, caplog, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr("zerounlearn_editor.support.model_zoo.load_model_and_tokenizer", refuse)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    hparams = tmp_path / "gd.yaml"
    hparams.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD",
                                                        model_name=str(tmp_path / "none"))), encoding="utf-8")
    code = main(["audit", "--hparams", str(hparams), "--data", str(write_tiny_counterfact(tmp_path / "cf.json")),
                 "--out", str(tmp_path / "o"), "--n", "1", "--probes", "formats,rtt", "--no-progress"])
    assert code == 2 and "rtt" in caplog.text and "--probes" in caplog.text
    assert not (tmp_path / "o").exists()


def test_cli_help_lists_rtt(capsys):
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "relearning,rtt,rwku or all" in text and "relearning and rtt probes fine-tune" in text


def test_report_tables_show_the_rtt_rows_and_their_kept_columns(tmp_path: Path):
    def entry(rtt_mlp, rtt_full):
        return {"status": "ok", "probes": {"prompt": {"recovered": 0.0, "items": [0, 0, 0]},
                                           "rtt-mlp": {"recovered": 100.0 * sum(rtt_mlp) / 3, "items": rtt_mlp},
                                           "rtt-full": {"recovered": 100.0 * sum(rtt_full) / 3, "items": rtt_full}}}

    records = {1: {"methods": {"base": entry([1, 1, 0], [1, 0, 0]), "Edit": entry([0, 1, 1], [0, 0, 1])}}}
    summary = write_audit_summary(tmp_path, {"data": "tiny", "n": 6}, ["base", "Edit"], records)
    recovered = json.loads((tmp_path / "audit.json").read_text())["methods"]["Edit"]["recovered"]
    assert recovered["rtt-mlp/kept"]["mean"] == pytest.approx(50.0)  # 1 of the base's 2 kept facts
    assert recovered["rtt-full/kept"]["mean"] == 0.0 and recovered["rtt-full"]["mean"] == pytest.approx(100 / 3)
    assert "| rtt-mlp | rtt-mlp/kept | rtt-full | rtt-full/kept |" in summary["table_markdown"]
    assert "| rtt-mlp | rtt-mlp/kept |" in (tmp_path / "audit.md").read_text()
    assert "rtt-S: the held-out half" in (tmp_path / "audit.md").read_text()
