"""Scale bench (``zerounlearn bench-scale``): metrics on the known subset, cached targets, resumable streams."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from pathlib import Path
from typing import Dict

import pytest
import torch
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.engine.pipeline import neutral_targets
from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.case_scoring import score_cases
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.harness.scale_batch import run_scale_batch
from zerounlearn_editor.harness.scale_config import ScaleConfig
from zerounlearn_editor.harness.scale_metrics import known_mask, scale_metrics
from zerounlearn_editor.harness.scale_rows import batch_row_path, stream_dir
from zerounlearn_editor.harness.scale_stream import run_scale_stream
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams

PPL_TEXT = " ".join(
    ["the city of paris is a large city in france", "many people live in london and it was known for its river"] * 4
)


def _scores(acc, first, para=(0.0,), spe=(1.0,)):
    def probe(a, f):
        return {"acc": list(a), "first_acc": list(f), "prob": [0.1] * len(a), "pred_ids": [[1]] * len(a)}

    return CaseScores(forget=probe(acc, first), paraphrase=probe(para, para), neighbour=probe(spe, spe))


def test_known_mask_uses_the_mean_forget_accuracy():
    pre = [
        _scores([0.5], [1.0]),
        _scores([0.25, 0.5], [0.0, 1.0]),
        _scores([1.0, 0.0], [1.0, 0.0]),
        _scores([0.0], [0.0]),
    ]
    assert known_mask(pre, 0.5) == [True, False, True, False]
    assert known_mask(pre, 0.6) == [False, False, False, False]


def test_scale_metrics_add_the_known_subset_columns():
    pre = [_scores([1.0], [1.0]), _scores([0.0], [0.0]), _scores([0.5], [1.0])]
    post = [_scores([0.5], [0.0], spe=(1.0,)), _scores([1.0], [1.0], spe=(0.0,)), _scores([0.5], [1.0], spe=(0.5,))]
    known = known_mask(pre)
    metrics = scale_metrics(post, pre, known)
    assert metrics["eff"] == pytest.approx(100 * 2 / 3)
    assert metrics["eff_first"] == pytest.approx(100 * 2 / 3)
    assert metrics["known_count"] == 2
    assert metrics["eff_known"] == pytest.approx(50.0)  # cases 0 and 2
    assert metrics["eff_first_known"] == pytest.approx(50.0)
    assert metrics["spe_known"] == pytest.approx(75.0)
    none = scale_metrics(post, pre, [False] * 3)
    assert none["known_count"] == 0 and "eff_known" not in none
    with pytest.raises(ValueError, match="one entry per case"):
        scale_metrics(post, pre, [True])


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("scale")
    corpus = write_corpus(root / "corpus.jsonl")
    (root / "ppl.txt").write_text(PPL_TEXT, encoding="utf-8")
    path = root / "hparams" / "ZeroUnlearn-GD" / "tiny.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        yaml.safe_dump(tiny_hparams_dict(root / "stats", corpus, alg_name="ZeroUnlearn-GD", fluency_max_increase=None)),
        encoding="utf-8",
    )
    return {
        "data": write_tiny_counterfact(root / "cf.json"),
        "ppl": root / "ppl.txt",
        "hparams": path,
    }


def _config(ws, out, ns, yaml_key="hparams", **kw) -> ScaleConfig:
    return ScaleConfig(hparams=[str(ws[yaml_key])], data=str(ws["data"]), seeds=[1], out=str(out), ns=list(ns),
                       ppl_tokens=30, ppl_text=str(ws["ppl"]), **kw)


def test_batch_rows_share_cached_targets_restore_the_model_and_resume(ws, tok, tmp_path):
    model = tiny_llama(tok)
    fingerprint = ModelFingerprint.of(model)
    summary = run_scale_batch(_config(ws, tmp_path, [2, 4], target_chunk=2), model=model, tok=tok)
    assert fingerprint.differences(model) == []
    assert [row["n"] for row in summary["rows"]] == [2, 4]
    files = sorted((tmp_path / "targets").glob("*.safetensors"))
    assert len(files) == 2  # 4 facts in chunks of 2, optimised once for both rows

    tag = "ZeroUnlearn-GD_tiny"
    small, large = (json.loads(batch_row_path(tmp_path, 1, tag, n).read_text()) for n in (2, 4))
    assert large["case_ids"][:2] == small["case_ids"]  # nested rows
    assert small["base"]["ppl"] == large["base"]["ppl"] and small["metrics"]["ppl"] is not None
    assert set(small["stages_seconds"]) >= {"targets", "keys", "solve"}
    assert small["edit_cost"]["rss_peak_above_start_mb"] >= 0.0
    for key in ("eff", "eff_first", "gen", "spe", "known_count"):
        assert key in large["metrics"]
    assert "| unedited | 4 |" in summary["table_markdown"]

    # the cached targets of the first chunk are the ones an edit of those two requests optimises
    hp = ZeroUnlearnGDHyperParams.from_hparams(str(ws["hparams"]))
    requests = [dict(c.request) for c in sample_cases(load_cases(str(ws["data"])), 4, 1)]
    cached, _, fresh = TargetCache(tmp_path / "targets", fingerprint).get(model, tok, hp, requests[:2], 2)
    assert fresh == []  # loaded, not optimised
    direct = neutral_targets(model, tok, requests[:2], hp)
    assert torch.allclose(cached.z, direct.z, atol=1e-5)

    # a rerun with the same rows does nothing; a new n adds only its row
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("seed_1/*.json")}
    run_scale_batch(_config(ws, tmp_path, [2, 4, 6], target_chunk=2), model=model, tok=tok)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert batch_row_path(tmp_path, 1, tag, 6).exists()
    assert len(list((tmp_path / "targets").glob("*.safetensors"))) == 3
    assert fingerprint.differences(model) == []


def test_stream_scores_round_one_every_round_and_resumes_to_the_same_state(ws, tok, tmp_path):
    model = tiny_llama(tok)
    fingerprint = ModelFingerprint.of(model)
    whole = tmp_path / "whole"
    summary = run_scale_stream(_config(ws, whole, [2], rounds=3, eval_every=2), model=model, tok=tok)
    assert fingerprint.differences(model) == []
    folder = stream_dir(whole, 1, "ZeroUnlearn-GD_tiny")
    rounds = [json.loads((folder / f"round_{k}.json").read_text()) for k in (1, 2, 3)]
    assert [r["forgotten"] for r in rounds] == [2, 4, 6]
    assert all("round1" in r and "this_round" in r for r in rounds)
    assert ["all" in r for r in rounds] == [False, True, True]  # every 2 rounds and after the last
    assert rounds[0]["round1"] == rounds[0]["this_round"]
    # the unedited scores of later rounds' facts come from the original weights, swapped in mid-stream
    cases = sample_cases(load_cases(str(ws["data"])), 6, 1)
    unedited = score_cases(model, tok, cases[:4])
    assert rounds[1]["all_base"]["eff_prob"] == pytest.approx(
        scale_metrics(unedited, unedited, known_mask(unedited))["eff_prob"]
    )
    assert rounds[1]["all_base"]["eff_prob"] != pytest.approx(rounds[1]["all"]["eff_prob"], rel=1e-3)
    assert sorted(p.name for p in folder.glob("weights_round_*")) == ["weights_round_3.safetensors"]
    stream = summary["streams"]["ZeroUnlearn-GD_tiny"]
    assert stream["rounds_done"] == 3 and len(stream["rows"]) == 3
    assert (whole / "scale_stream.md").exists()

    # killed after round 2: the round-3 record never written, the round-2 weights still there
    cut = tmp_path / "cut"
    run_scale_stream(_config(ws, cut, [2], rounds=2, eval_every=2), model=model, tok=tok)
    cut_folder = stream_dir(cut, 1, "ZeroUnlearn-GD_tiny")
    stamp = (cut_folder / "round_1.json").stat().st_mtime_ns
    run_scale_stream(_config(ws, cut, [2], rounds=3, eval_every=2), model=model, tok=tok)
    assert (cut_folder / "round_1.json").stat().st_mtime_ns == stamp  # not redone
    from safetensors.torch import load_file

    a, b = (
        load_file(str(folder / "weights_round_3.safetensors")),
        load_file(str(cut_folder / "weights_round_3.safetensors")),
    )
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert json.loads((cut_folder / "round_3.json").read_text())["all"]["eff"] == pytest.approx(rounds[2]["all"]["eff"])
    assert fingerprint.differences(model) == []


def test_bad_settings_are_named(ws, tmp_path):
    with pytest.raises(BenchConfigError, match="nowhere.yaml not found"):
        run_scale_batch(
            ScaleConfig(hparams=["nowhere.yaml"], data=str(ws["data"]), seeds=[1], out=str(tmp_path), ns=[2])
        )
    with pytest.raises(BenchConfigError, match="one --n"):
        run_scale_stream(_config(ws, tmp_path, [2, 4], rounds=2))
    with pytest.raises(BenchConfigError, match="has 8"):
        run_scale_batch(_config(ws, tmp_path, [20]), model=object(), tok=None)
    twice = dataclasses.replace(_config(ws, tmp_path, [2]), hparams=[str(ws["hparams"])] * 2)
    with pytest.raises(BenchConfigError, match="share the file-name tag 'ZeroUnlearn-GD_tiny'"):
        run_scale_batch(twice)  # one row file for two YAMLs


def test_known_only_draws_known_cases_and_caches_the_selection(ws, tok, tmp_path, monkeypatch):
    from zerounlearn_editor.harness import scale_cases

    model = tiny_llama(tok)
    calls = []

    def fake_select(model, tok, cases, n, min_accuracy=1.0, batch_size=64):
        calls.append((len(cases), n, min_accuracy))
        return [c for c in cases if c.request["subject"] != "france"][:n]

    monkeypatch.setattr(scale_cases, "select_known_cases", fake_select)
    config = _config(ws, tmp_path, [2], rounds=2, eval_every=2, known_only=True, known_min_accuracy=0.4)
    run_scale_stream(config, model=model, tok=tok)
    meta = json.loads((stream_dir(tmp_path, 1, "ZeroUnlearn-GD_tiny") / "stream.json").read_text())
    stored = json.loads((tmp_path / "known_seed_1.json").read_text())
    assert calls == [(8, 4, 0.4)] and meta["case_ids"] == stored["case_ids"]
    # the pool shuffled with the seed (sample_cases of the whole pool would keep the file order)
    pool = load_cases(str(ws["data"]))
    shuffled = [c.case_id for c in random.Random(1).sample(pool, len(pool)) if c.request["subject"] != "france"]
    assert meta["case_ids"] == shuffled[:4] != [c.case_id for c in pool if c.request["subject"] != "france"][:4]
    run_scale_stream(dataclasses.replace(config, rounds=1), model=model, tok=tok)  # fewer facts: the cache answers
    assert len(calls) == 1
    with pytest.raises(BenchConfigError, match="has 8"):
        run_scale_stream(dataclasses.replace(config, rounds=5), model=model, tok=tok)


def _case(case_id: str, prompt: str, subject: str, answer: str):
    from zerounlearn_editor.data.types import Probe, UnlearnCase

    request = {"prompt": prompt, "subject": subject, "ground_truth": answer, "target_new": ""}
    return UnlearnCase(case_id=case_id, request=request, forget=[Probe(prompt, answer)], paraphrase=[], neighbour=[],
                       source="test")


def test_one_request_per_prompt_replaces_repeats_at_the_end_and_keeps_the_prefix():
    from zerounlearn_editor.harness.scale_cases import one_request_per_prompt

    drawn = [_case("a", "Lyon is twinned with", "Lyon", "Santiago"), _case("b", "Paris is in", "Paris", "France"),
             _case("c", "Lyon is twinned with", "Lyon", "Florence"), _case("d", "Rome is in", "Rome", "Italy")]
    spare = [_case("b", "Paris is in", "Paris", "France"), _case("e", "Lyon is twinned with", "Lyon", "Kyoto"),
             _case("f", "Oslo is in", "Oslo", "Norway"), _case("g", "Bern is in", "Bern", "Switzerland")]
    out, replaced = one_request_per_prompt(drawn, spare)
    assert replaced == 1
    # the cases before the first repeat keep their places; the repeat's replacement comes last, from the
    # first spare case with an unused prompt
    assert [c.case_id for c in out] == ["a", "b", "d", "f"]
    assert len({(c.request["prompt"], c.request["subject"]) for c in out}) == len(out) == len(drawn)
    assert one_request_per_prompt(drawn[:2], spare) == (drawn[:2], 0)


def test_stage_memory_peaks_split_a_trace_by_the_edit_stages():
    """peaks_in_spans: per stage, the highest sample in its spans above the block's start, and the largest rise
    within one span over the last sample before it; a stage with no sample inside is left out."""
    from zerounlearn_editor.harness.speed_measure import MemoryMeter

    meter = MemoryMeter(torch.device("cpu"), trace=True)
    meter.start_bytes = 100
    meter.samples = [(0.0, 100), (1.0, 130), (2.0, 180), (3.0, 150), (4.0, 400), (5.0, 160), (6.0, 170)]
    spans = [("keys", 0.5, 2.5), ("solve", 3.5, 4.5), ("keys", 5.5, 6.5), ("empty", 6.6, 6.7)]
    assert meter.peaks_in_spans(spans) == {"keys": (80, 80), "solve": (300, 250)}


def test_edit_report_records_every_timed_stage_in_order():
    """Each timed block leaves (stage, start, end) in EditReport.stage_spans, also a block that raised; the
    spans' lengths add up to report.timings."""
    from zerounlearn_editor.engine.pipeline import EditReport, _timer

    report = EditReport()
    with _timer(report, "keys"):
        pass
    with pytest.raises(RuntimeError), _timer(report, "solve"):
        raise RuntimeError("boom")
    with _timer(report, "keys"):
        pass
    assert [s[0] for s in report.stage_spans] == ["keys", "solve", "keys"]
    assert all(start <= end for _, start, end in report.stage_spans)
    assert report.stage_spans[0][2] <= report.stage_spans[1][1]
    total = sum(end - start for stage, start, end in report.stage_spans if stage == "keys")
    assert report.timings["keys"] == pytest.approx(total)


def _copy_yaml(ws, folder: Path, name: str = "tiny.yaml", **changes) -> Path:
    """The tiny ZeroUnlearn-GD YAML copied to ``folder/name``, with ``changes`` to its keys."""
    data = yaml.safe_load(ws["hparams"].read_text(encoding="utf-8"))
    data.update(changes)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_batch_refuses_stored_rows_of_other_settings_before_the_model_loads(ws, tok, tmp_path):
    """Issue 46 item 5: a rerun with another --ppl-tokens, --known-threshold, the YAML or the data file edited in
    place, or another YAML's rows of other settings in the same --out, is refused naming the setting (not resumed
    as "every row done" with the old numbers); model=None proves the refusal comes before any model load."""
    yaml_path = _copy_yaml(ws, tmp_path / "hparams" / "ZeroUnlearn-GD")
    data = tmp_path / "cf.json"
    data.write_text(ws["data"].read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "out"

    def config(**kw) -> ScaleConfig:
        base = dict(hparams=[str(yaml_path)], data=str(data), seeds=[1], out=str(out), ns=[2], ppl_tokens=30,
                    ppl_text=str(ws["ppl"]))
        return ScaleConfig(**dict(base, **kw))

    model = tiny_llama(tok)
    run_scale_batch(config(), model=model, tok=tok)
    row = batch_row_path(out, 1, "ZeroUnlearn-GD_tiny", 2)
    stamp = row.stat().st_mtime_ns
    run_scale_batch(config(), model=model, tok=tok)  # the same settings: resumed, nothing redone
    assert row.stat().st_mtime_ns == stamp
    with pytest.raises(BenchConfigError, match=r"_n2\.json holds results of another configuration \(ppl_tokens: 30 "
                                               r"there, 16 here\)"):
        run_scale_batch(config(ppl_tokens=16))
    with pytest.raises(BenchConfigError, match="known_min_accuracy: 0.5 there, 0.75 here"):
        run_scale_batch(config(known_min_accuracy=0.75))
    with pytest.raises(BenchConfigError, match="known_only: False there, True here"):
        run_scale_batch(config(known_only=True))
    other_text = tmp_path / "other_ppl.txt"
    other_text.write_text(PPL_TEXT.upper(), encoding="utf-8")
    with pytest.raises(BenchConfigError, match=r"\(ppl_text_sha256: "):
        run_scale_batch(config(ppl_text=str(other_text)))

    _copy_yaml(ws, yaml_path.parent, v_num_grad_steps=3)  # the YAML edited in place
    with pytest.raises(BenchConfigError, match=r"\(hparams_sha256: '[0-9a-f]{64}' there, '[0-9a-f]{64}' here\)"):
        run_scale_batch(config())
    _copy_yaml(ws, yaml_path.parent)  # back as it was

    records = json.loads(data.read_text(encoding="utf-8"))
    for record in records:  # the same case ids, other answers
        record["requested_rewrite"]["target_true"]["str"] = "nowhere"
    data.write_text(json.dumps(records), encoding="utf-8")
    with pytest.raises(BenchConfigError, match=r"\(data_sha256: "):
        run_scale_batch(config())
    data.write_text(ws["data"].read_text(encoding="utf-8"), encoding="utf-8")

    # another YAML's rows go into the same table: their perplexity setting must be this run's too
    second = _copy_yaml(ws, tmp_path / "hparams" / "ZeroUnlearn-GD", "second.yaml")
    with pytest.raises(BenchConfigError, match=r"ZeroUnlearn-GD_tiny_n2\.json .*\(ppl_tokens: 30 there, 16 here\)"):
        run_scale_batch(config(hparams=[str(second)], ppl_tokens=16))
    assert row.stat().st_mtime_ns == stamp and not batch_row_path(out, 1, "ZeroUnlearn-GD_second", 2).exists()
    stored = json.loads(row.read_text())
    assert stored["settings"]["ppl_tokens"] == 30 and stored["tag"] == "ZeroUnlearn-GD_tiny"


def test_stream_refuses_to_resume_under_an_edited_yaml(ws, tok, tmp_path):
    """Issue 46 item 5: a stream resumed after its YAML was edited in place is refused (the old code resumed the
    edited model of the old YAML and went on with the new one, one table mixing both)."""
    yaml_path = _copy_yaml(ws, tmp_path / "hparams" / "ZeroUnlearn-GD")
    out = tmp_path / "out"

    def config(**kw) -> ScaleConfig:
        return ScaleConfig(hparams=[str(yaml_path)], data=str(ws["data"]), seeds=[1], out=str(out), ns=[2],
                           ppl_tokens=30, ppl_text=str(ws["ppl"]), **kw)

    model = tiny_llama(tok)
    run_scale_stream(config(rounds=1), model=model, tok=tok)
    folder = stream_dir(out, 1, "ZeroUnlearn-GD_tiny")
    _copy_yaml(ws, yaml_path.parent, v_num_grad_steps=3)
    with pytest.raises(BenchConfigError, match=r"stream\.json holds results of another configuration "
                                               r"\(hparams_sha256: "):
        run_scale_stream(config(rounds=2))
    with pytest.raises(BenchConfigError, match="ppl_tokens: 30 there, 12 here"):
        run_scale_stream(dataclasses.replace(config(rounds=2), ppl_tokens=12))
    assert not (folder / "round_2.json").exists()
    _copy_yaml(ws, yaml_path.parent)  # as it was: the stream resumes
    run_scale_stream(config(rounds=2), model=model, tok=tok)
    assert (folder / "round_2.json").exists()


def test_rows_record_and_tables_print_the_perplexity_tokens_measured(ws, tok, tmp_path):
    """Issue 46 item 6: --ppl-tokens beyond the text's length records and prints the tokens measured."""
    measured = len(tok(PPL_TEXT)["input_ids"])
    assert measured < 1000
    model = tiny_llama(tok)
    summary = run_scale_batch(dataclasses.replace(_config(ws, tmp_path / "b", [2]), ppl_tokens=1000), model=model,
                              tok=tok)
    row = json.loads(batch_row_path(tmp_path / "b", 1, "ZeroUnlearn-GD_tiny", 2).read_text())
    assert row["ppl_tokens"] == measured and row["settings"]["ppl_tokens"] == 1000
    assert f"perplexity on the first {measured} tokens" in summary["table_markdown"]
    stream = run_scale_stream(dataclasses.replace(_config(ws, tmp_path / "s", [2]), ppl_tokens=1000), model=model,
                              tok=tok)
    meta = json.loads((stream_dir(tmp_path / "s", 1, "ZeroUnlearn-GD_tiny") / "stream.json").read_text())
    assert meta["ppl_tokens"] == measured
    assert f"perplexity on the first {measured} tokens" in stream["table_markdown"]
    assert "1000 tokens" not in stream["table_markdown"] + summary["table_markdown"]
    # one token cannot give a perplexity: refused when the model is there, before the statistics and any edit
    with pytest.raises(BenchConfigError, match=r"ppl\.txt gives 1 token\(s\); perplexity needs at least 2"):
        run_scale_batch(dataclasses.replace(_config(ws, tmp_path / "one", [2]), ppl_tokens=1), model=model, tok=tok)
    assert not (tmp_path / "one" / "seed_1").exists()


def test_a_yaml_in_the_working_directory_gets_a_legend_label(ws, tok, tmp_path, monkeypatch):
    """Issue 46 item 16: many.yaml in the working directory was tagged "_many", and matplotlib leaves labels
    starting with "_" out of the legend: scale_stream.png had none."""
    from zerounlearn_editor.harness import scale_report
    from zerounlearn_editor.harness.scale_rows import yaml_tag

    runs = tmp_path / "runs"
    _copy_yaml(ws, runs, "many.yaml")
    monkeypatch.chdir(runs)
    figures = []
    monkeypatch.setattr(scale_report, "save_figure", lambda fig, path, dpi=110: figures.append(fig) or path)
    summary = run_scale_stream(ScaleConfig(hparams=["many.yaml"], data=str(ws["data"]), seeds=[1], out="out",
                                           ns=[2], ppl_tokens=0), model=tiny_llama(tok), tok=tok)
    assert list(summary["streams"]) == ["runs_many"]
    assert not any(yaml_tag(p).startswith(("_", ".")) for p in ("many.yaml", "./x.yaml", "/_a/_b.yaml", "/c.yaml"))
    if scale_report.pyplot("the test") is None:
        pytest.skip("matplotlib not installed: the tag is checked, not the legend")
    legend = figures[0].axes[0].get_legend()
    assert legend is not None
    assert "runs_many 1x2 (all tokens)" in [text.get_text() for text in legend.get_texts()]


def test_batch_refuses_stream_rounds(ws, tmp_path):
    """Issue 46 item 16: a batch run given rounds was run as one batch, the rounds ignored without a word."""
    with pytest.raises(BenchConfigError, match="rounds is a stream setting"):
        run_scale_batch(_config(ws, tmp_path, [2], rounds=3))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("n", ["10,abc", "0", "2,-1", " , "])
def test_cli_names_the_option_of_a_bad_n(n, capsys):
    """Issue 46 item 16: ``--n 10,abc`` failed with "invalid literal for int()" naming no option."""
    from zerounlearn_editor.cli import main

    with pytest.raises(SystemExit) as info:
        main(["bench-scale", "batch", "--hparams", "h.yaml", "--data", "d", "--out", "o", "--n", n])
    assert info.value.code == 2
    assert f"argument --n: expected a comma list of positive integers, got {n!r}" in capsys.readouterr().err


@pytest.mark.parametrize("mode,option", [("batch", ["--rounds", "3"]), ("batch", ["--eval-every", "2"]),
                                         ("stream", ["--target-chunk", "5"])])
def test_cli_refuses_an_option_of_the_other_mode(mode, option, tmp_path, caplog):
    """Issue 46 item 16: ``batch --rounds 3`` ran one batch, the rounds ignored without a word."""
    from zerounlearn_editor.cli import main

    out = tmp_path / "out"
    with caplog.at_level("ERROR"):
        code = main(["bench-scale", mode, "--hparams", str(tmp_path / "h.yaml"), "--data", "d", "--out", str(out),
                     "--n", "2", *option])
    assert code == 2
    assert f"bench-scale {mode}: {option[0]} is for {'stream' if mode == 'batch' else 'batch'} runs only" in caplog.text
    assert not out.exists()


def test_the_default_perplexity_text_is_the_embedded_one(ws, tok, tmp_path, monkeypatch):
    """Without --ppl-text, bench-scale (as bench) measures PPL on the embedded WikiText-2 test split; it used to
    look for it in the benchmark data folder only, and stopped when none was found."""
    from zerounlearn_editor.data.builtin import default_ppl_text
    from zerounlearn_editor.evaluation.perplexity import perplexity

    (tmp_path / "no_data").mkdir()
    monkeypatch.setenv("ZEROUNLEARN_DATA_DIR", str(tmp_path / "no_data"))
    model = tiny_llama(tok)
    config = ScaleConfig(hparams=[str(ws["hparams"])], data=str(ws["data"]), seeds=[1], out=str(tmp_path / "out"),
                         ns=[2], ppl_tokens=40)
    run_scale_batch(config, model=model, tok=tok)
    row = json.loads(batch_row_path(tmp_path / "out", 1, "ZeroUnlearn-GD_tiny", 2).read_text())
    assert row["base"]["ppl"] == pytest.approx(perplexity(model, tok, default_ppl_text(), max_tokens=40))
    assert row["ppl_tokens"] == 40


def test_rows_made_on_other_weights_under_the_same_model_name_are_refused(ws, tok, tmp_path):
    """Issue 46 item 5, the model's identity: the YAML names the model, but the weights behind the name can change
    (a re-prepared folder); once the model is loaded, rows and streams made on other weights are refused before
    the statistics or any edit."""
    model = tiny_llama(tok)
    run_scale_batch(_config(ws, tmp_path / "b", [2]), model=model, tok=tok)
    run_scale_stream(_config(ws, tmp_path / "s", [2], rounds=1), model=model, tok=tok)
    other = tiny_llama(tok)
    with torch.no_grad():
        other.model.layers[0].mlp.up_proj.weight[0, 0] += 1.0
    with pytest.raises(BenchConfigError, match=r"_n2\.json holds results of another configuration \(model_sha256: "):
        run_scale_batch(_config(ws, tmp_path / "b", [2, 4]), model=other, tok=tok)
    assert not batch_row_path(tmp_path / "b", 1, "ZeroUnlearn-GD_tiny", 4).exists()
    with pytest.raises(BenchConfigError, match=r"stream\.json holds results of another configuration \(model_sha256: "):
        run_scale_stream(_config(ws, tmp_path / "s", [2], rounds=2), model=other, tok=tok)
    run_scale_batch(_config(ws, tmp_path / "b", [2, 4]), model=model, tok=tok)  # the same weights: resumed
    assert batch_row_path(tmp_path / "b", 1, "ZeroUnlearn-GD_tiny", 4).exists()


def test_rows_are_keyed_by_the_retain_file_the_yaml_names(ws, tok, tmp_path):
    """A YAML's ``retain_file`` is read by the edit, so its content keys the rows like the YAML's own: a rerun with
    the retain prompts changed in place is refused naming ``retain_file_sha256`` (before the model loads), the
    same prompts resume, and a YAML naming a missing retain file is refused naming the YAML and the key."""
    retain = tmp_path / "hparams" / "ZeroUnlearn-GD" / "keep.json"
    retain.parent.mkdir(parents=True)
    retain.write_text(json.dumps([{"prompt": "paris is in", "subject": "paris"}]), encoding="utf-8")
    yaml_path = _copy_yaml(ws, retain.parent, retain_file="keep.json", retain_nullspace_weight=0.1)
    out = tmp_path / "out"
    config = ScaleConfig(hparams=[str(yaml_path)], data=str(ws["data"]), seeds=[1], out=str(out), ns=[2],
                         ppl_tokens=30, ppl_text=str(ws["ppl"]))
    run_scale_batch(config, model=tiny_llama(tok), tok=tok)
    row = batch_row_path(out, 1, "ZeroUnlearn-GD_tiny", 2)
    stored = json.loads(row.read_text())["settings"]
    assert stored["retain_file_sha256"] == hashlib.sha256(retain.read_bytes()).hexdigest()
    stamp = row.stat().st_mtime_ns
    retain.write_text(json.dumps([{"prompt": "berlin is in", "subject": "berlin"}]), encoding="utf-8")
    with pytest.raises(BenchConfigError, match=r"_n2\.json holds results of another configuration "
                                               r"\(retain_file_sha256: '[0-9a-f]{64}' there, '[0-9a-f]{64}' here\)"):
        run_scale_batch(config)  # model=None: refused before any load
    retain.write_text(json.dumps([{"prompt": "paris is in", "subject": "paris"}]), encoding="utf-8")
    run_scale_batch(config, model=tiny_llama(tok), tok=tok)  # the same prompts: resumed, nothing redone
    assert row.stat().st_mtime_ns == stamp
    retain.unlink()
    with pytest.raises(BenchConfigError, match=r"tiny\.yaml: retain_file '.*keep\.json' is not a file"):
        run_scale_batch(config)


def test_rows_of_a_yaml_without_retain_file_keep_the_yaml_only_key(ws, tok, tmp_path):
    """Without a ``retain_file`` the row's settings are keyed as before (no ``retain_file_sha256``), so rows
    stored before the retain key existed still resume."""
    run_scale_batch(_config(ws, tmp_path, [2]), model=tiny_llama(tok), tok=tok)
    stored = json.loads(batch_row_path(tmp_path, 1, "ZeroUnlearn-GD_tiny", 2).read_text())["settings"]
    assert "retain_file_sha256" not in stored
    assert stored["hparams_sha256"] == hashlib.sha256(ws["hparams"].read_bytes()).hexdigest()


def test_rows_scored_with_windows_as_tokenized_are_refused_where_windows_now_open_with_bos(ws, tok, tmp_path):
    """A row records ``ppl_bos_windows`` where its perplexity opened every window with BOS (a tokenizer that opens
    the text with it, as the tiny one and Gemma's do); a row stored before the key read its windows as tokenized
    and is refused there once the tokenizer is loaded, naming the key, before any new row is written. A tokenizer
    without a leading BOS (SmolLM2's) reads both ways alike: its rows carry no key and resume."""
    model = tiny_llama(tok)
    out = tmp_path / "bos"
    run_scale_batch(_config(ws, out, [2]), model=model, tok=tok)
    path = batch_row_path(out, 1, "ZeroUnlearn-GD_tiny", 2)
    row = json.loads(path.read_text())
    assert row["ppl_bos_windows"] is True
    del row["ppl_bos_windows"]  # as stored before the key
    path.write_text(json.dumps(row))
    with pytest.raises(BenchConfigError, match=r"_n2\.json holds results of another configuration "
                                               r"\(ppl_bos_windows: False there, True here"):
        run_scale_batch(_config(ws, out, [2, 4]), model=model, tok=tok)
    assert not batch_row_path(out, 1, "ZeroUnlearn-GD_tiny", 4).exists()
    streams = tmp_path / "streams"
    run_scale_stream(_config(ws, streams, [2], rounds=1), model=model, tok=tok)
    stream_json = stream_dir(streams, 1, "ZeroUnlearn-GD_tiny") / "stream.json"
    stream = json.loads(stream_json.read_text())
    assert stream["ppl_bos_windows"] is True
    del stream["ppl_bos_windows"]
    stream_json.write_text(json.dumps(stream))
    with pytest.raises(BenchConfigError, match=r"stream\.json holds results of another configuration "
                                               r"\(ppl_bos_windows: False there, True here"):
        run_scale_stream(_config(ws, streams, [2], rounds=2), model=model, tok=tok)
    plain_tok = tiny_tokenizer(bos=False)
    plain = tmp_path / "plain"
    run_scale_batch(_config(ws, plain, [2]), model=model, tok=plain_tok)
    assert "ppl_bos_windows" not in json.loads(batch_row_path(plain, 1, "ZeroUnlearn-GD_tiny", 2).read_text())
    run_scale_batch(_config(ws, plain, [2, 4]), model=model, tok=plain_tok)
    assert batch_row_path(plain, 1, "ZeroUnlearn-GD_tiny", 4).exists()
