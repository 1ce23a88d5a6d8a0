"""Sequential unlearning bench (``zerounlearn bench --rounds``) on a tiny Llama and tiny CounterFact."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.harness import (
    BenchConfig,
    BenchConfigError,
    EditOutcome,
    MethodSpec,
    PreparedMethod,
    default_registry,
)
from zerounlearn_editor.harness.rounds import rounds_path, run_rounds
from zerounlearn_editor.harness.rounds_report import format_rounds

PPL_TEXT = " ".join(
    ["the city of paris is a large city in france", "many people live in london and it was known for its river"] * 4
)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("rounds")
    corpus = write_corpus(root / "corpus.jsonl")
    (root / "ppl.txt").write_text(PPL_TEXT, encoding="utf-8")
    for alg in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        path = root / "hparams" / alg / "tiny.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump(tiny_hparams_dict(root / "stats", corpus, alg_name=alg)), encoding="utf-8")
    return {"root": root, "data": write_tiny_counterfact(root / "cf.json"), "ppl": root / "ppl.txt",
            "main": root / "hparams" / "ZeroUnlearn" / "tiny.yaml"}


def _config(ws, out, methods, seeds=(1,), n=2) -> BenchConfig:
    return BenchConfig(
        hparams=str(ws["main"]),
        data=str(ws["data"]),
        seeds=list(seeds),
        methods=list(methods),
        out=str(out),
        n=n,
        ppl_tokens=40,
        ppl_text=str(ws["ppl"]),
        progress=False,
    )


def _recording_spec(calls: List[Dict[str, Any]]) -> MethodSpec:
    """A fake method adding 1.0 to one weight per edit and recording what it saw."""

    def prepare(ctx) -> PreparedMethod:
        def edit(model, tok, requests, stats):
            weight = model.model.layers[1].mlp.down_proj.weight
            calls.append(
                {
                    "subjects": [r["subject"] for r in requests],
                    "offset": float(weight.detach()[0, 0]),
                    "stats": id(stats),
                }
            )
            copy = {"model.layers.1.mlp.down_proj.weight": weight.detach().clone()}
            with torch.no_grad():
                weight[0, 0] += 1.0
            return EditOutcome(copy)

        return PreparedMethod("Rec", edit, stats_layers=(1,), stats_module_tmp="model.layers.{}.mlp.down_proj")

    return MethodSpec("Rec", lambda lookup: {"fake": 1}, prepare)


def test_rounds_edit_the_edited_model_then_one_batch_and_restore(ws, tok, tmp_path):
    model = tiny_llama(tok)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    start = float(model.model.layers[1].mlp.down_proj.weight.detach()[0, 0])
    calls: List[Dict[str, Any]] = []
    registry = dict(default_registry(), Rec=_recording_spec(calls))
    summary = run_rounds(_config(ws, tmp_path, ["Rec"], n=2), 3, model=model, tok=tok, registry=registry)

    # rounds 1..3 see the weight left by the previous rounds; the batch starts from the original
    assert [c["offset"] - start for c in calls] == pytest.approx([0.0, 1.0, 2.0, 0.0])
    assert [len(c["subjects"]) for c in calls] == [2, 2, 2, 6]
    assert calls[3]["subjects"] == sum((c["subjects"] for c in calls[:3]), [])  # consecutive chunks of the draw
    assert len({c["stats"] for c in calls}) == 1  # one C0 bank for every round
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key

    record = json.loads(rounds_path(tmp_path, 1).read_text())
    rounds = record["methods"]["Rec"]["rounds"]
    assert [r["forgotten"] for r in rounds] == [2, 4, 6] and record["methods"]["Rec"]["batch"]["forgotten"] == 6
    assert [r["round"] for r in summary["methods"]["Rec"]["rounds"]] == [1, 2, 3]
    assert "one batch of 6" in summary["table_markdown"] and "0 (unedited)" in summary["table_markdown"]
    assert (tmp_path / "rounds.md").is_file()

    # resume: nothing left to do, the model is not even needed
    calls.clear()
    run_rounds(_config(ws, tmp_path, ["Rec"], n=2), 3, registry=registry,
               loader=lambda *a: (_ for _ in ()).throw(AssertionError("model loaded")))
    assert calls == []


def test_eff_is_over_everything_forgotten_so_far(ws, tok, tmp_path):
    model = tiny_llama(tok)
    summary = run_rounds(_config(ws, tmp_path, ["ZeroUnlearn", "ZeroUnlearn-GD"], n=2), 2, model=model, tok=tok)
    record = json.loads(rounds_path(tmp_path, 1).read_text())
    base = record["base"]["metrics"]
    for name in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        first, second = record["methods"][name]["rounds"]
        # after round 2, Eff covers both rounds' facts: the mean of round 1's facts (re-scored) and round 2's own
        assert second["metrics"]["eff_round"] <= 100.0 and first["metrics"]["eff"] == pytest.approx(
            first["metrics"]["eff_round"]
        )
        for metrics in (first["metrics"], second["metrics"]):
            assert metrics["ppl"] > 0 and 0 <= metrics["spe"] <= 100
        assert summary["methods"][name]["batch"]["metrics"]["eff"]["n"] == 1
    assert base["ppl"] > 0
    assert "### ZeroUnlearn-GD" in format_rounds(summary)


def test_rounds_cli_and_errors(ws, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    tok = tiny_tokenizer()
    model_dir = tmp_path / "tiny-model"
    tiny_llama(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    config = tiny_hparams_dict(
        ws["root"] / "stats", ws["root"] / "corpus.jsonl", alg_name="ZeroUnlearn-GD", model_name=str(model_dir)
    )
    main = tmp_path / "hparams" / "ZeroUnlearn-GD" / "tiny.yaml"
    main.parent.mkdir(parents=True)
    main.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = tmp_path / "cli"
    code = cli_main(
        [
            "bench",
            "--hparams",
            str(main),
            "--data",
            str(ws["data"]),
            "--out",
            str(out),
            "--n",
            "2",
            "--seeds",
            "1",
            "--rounds",
            "2",
            "--ppl-tokens",
            "40",
            "--ppl-text",
            str(ws["ppl"]),
            "--no-progress",
            "--methods",
            "ZeroUnlearn-GD",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "### ZeroUnlearn-GD" in printed and "plot:" in printed
    assert (out / "rounds.png").stat().st_size > 1000
    with pytest.raises(BenchConfigError, match="5 rounds x 2 facts need 10 cases"):
        run_rounds(_config(ws, tmp_path / "big", ["ZeroUnlearn"], n=2), 5)
    with pytest.raises(BenchConfigError, match="rounds must be >= 1"):
        run_rounds(_config(ws, tmp_path / "zero", ["ZeroUnlearn"]), 0)


@pytest.mark.parametrize("progress", [False, True])
def test_run_rounds_scopes_progress_bars_to_the_config(monkeypatch, progress):
    """``--no-progress`` reaches every bar of a rounds run (the known-case scoring showed bars before)."""
    from zerounlearn_editor.harness import rounds as rounds_module
    from zerounlearn_editor.harness.bench_config import BenchConfig
    from zerounlearn_editor.support.progress import progress_enabled

    seen = []
    monkeypatch.setattr(rounds_module, "_run_rounds", lambda *a, **k: seen.append(progress_enabled()) or {})
    rounds_module.run_rounds(BenchConfig(hparams="h.yaml", data="counterfact", seeds=[1], methods=["ZeroUnlearn"],
                                         out="o", n=2, progress=progress), 2)
    assert seen == [progress]


def test_rounds_drop_neighbours_forgotten_in_any_round_and_guard_resume(ws, tok, tmp_path, monkeypatch):
    import zerounlearn_editor.harness.rounds as rounds_module

    real = rounds_module.drop_batch_forget_neighbours
    seen: List[int] = []

    def fake(cases):
        seen.append(len(cases))
        kept, _ = real(cases)
        return kept, 3  # pretend three probes were dropped

    monkeypatch.setattr(rounds_module, "drop_batch_forget_neighbours", fake)
    calls: List[Dict[str, Any]] = []
    registry = dict(default_registry(), Rec=_recording_spec(calls))
    run_rounds(_config(ws, tmp_path, ["Rec"], n=2), 2, model=tiny_llama(tok), tok=tok, registry=registry)
    assert seen == [4]  # every case of every round, filtered together
    assert json.loads(rounds_path(tmp_path, 1).read_text())["neighbours_dropped"] == 3

    monkeypatch.setattr(rounds_module, "drop_batch_forget_neighbours", real)  # drops 0 on this data
    with pytest.raises(BenchConfigError, match="3 neighbour probe.*drops 0"):
        run_rounds(
            _config(ws, tmp_path, ["Rec", "ZeroUnlearn"], n=2), 2, model=tiny_llama(tok), tok=tok, registry=registry
        )


def test_rounds_name_the_setting_of_a_stored_seed_and_give_the_ppl_tokens_measured(ws, tok, tmp_path):
    """Issue 46 items 5 and 6 for the rounds bench: a stored seed file of other settings is refused naming the
    setting (it said only "another configuration"), and rounds.md gives the perplexity tokens measured (it gave
    the option, 1000, on a text of fewer tokens)."""
    registry = dict(default_registry(), Rec=_recording_spec([]))
    config = dataclasses.replace(_config(ws, tmp_path, ["Rec"], n=2), ppl_tokens=1000)
    run_rounds(config, 2, model=tiny_llama(tok), tok=tok, registry=registry)
    measured = len(tok(PPL_TEXT)["input_ids"])
    assert measured < 1000
    assert json.loads(rounds_path(tmp_path, 1).read_text())["ppl_tokens_measured"] == measured
    text = (tmp_path / "rounds.md").read_text(encoding="utf-8")
    assert f"PPL on the first {measured} tokens of ppl.txt" in text and "1000 tokens" not in text
    with pytest.raises(BenchConfigError, match=r"rounds_seed_1\.json holds results of another configuration "
                                               r"\(ppl_tokens: 1000 there, 40 here\)"):
        run_rounds(_config(ws, tmp_path, ["Rec"], n=2), 2, registry=registry,
                   loader=lambda *a: pytest.fail("model loaded"))


def test_rounds_refuse_a_seed_file_scored_with_windows_as_tokenized_where_windows_open_with_bos(ws, tok, tmp_path):
    registry = dict(default_registry(), Rec=_recording_spec([]))
    run_rounds(_config(ws, tmp_path, ["Rec"], n=2), 2, model=tiny_llama(tok), tok=tok, registry=registry)
    path = rounds_path(tmp_path, 1)
    record = json.loads(path.read_text())
    assert record["run"]["ppl_bos_windows"] is True
    del record["run"]["ppl_bos_windows"]
    path.write_text(json.dumps(record))
    before = path.read_text()
    registry["Rec2"] = _recording_spec([])
    with pytest.raises(BenchConfigError, match=r"rounds_seed_1\.json holds results of another configuration "
                                               r"\(ppl_bos_windows: False there, True here"):
        run_rounds(_config(ws, tmp_path, ["Rec", "Rec2"], n=2), 2, model=tiny_llama(tok), tok=tok, registry=registry)
    assert path.read_text() == before
