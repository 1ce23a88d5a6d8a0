"""The speed benchmark's code path on tiny models (CPU): every stage timed, both pipelines agree."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tiny_models import REPO_ROOT, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.harness import speed_bench
from zerounlearn_editor.harness.speed_bench import SpeedConfig, build_random_model, parse_int_list, run_speed


def _write_hparams(tmp_path: Path) -> Path:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    for method in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        folder = tmp_path / "hparams" / method
        folder.mkdir(parents=True)
        (folder / "tiny.yaml").write_text(
            yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name=method))
        )
    return tmp_path / "hparams" / "ZeroUnlearn" / "tiny.yaml"


def test_run_speed_times_every_stage_and_both_pipelines_agree(tmp_path, monkeypatch):
    tok = tiny_tokenizer()
    monkeypatch.setattr(speed_bench, "_load_model", lambda cfg, hp, device: (tiny_llama(tok), tok))
    out = tmp_path / "speed.json"
    data = write_tiny_counterfact(tmp_path / "counterfact.json")  # no benchmark data folder needed
    cfg = SpeedConfig(
        hparams=str(_write_hparams(tmp_path)),
        ns=[2, 3],
        device="cpu",
        stats_passages=10,
        micro_passages=5,
        out=str(out),
        progress=False,
        data=str(data),
    )
    result = run_speed(cfg)
    assert json.loads(out.read_text())["markdown"] == result["markdown"]
    assert [r["pipeline"] for r in result["statistics"]] == ["ours", "per-request"]
    assert [r["corpus_passes"] for r in result["statistics"]] == [1, 4]
    assert result["statistics"][0]["tokens"] == result["statistics"][1]["tokens"] > 0
    assert [r["passes"] for r in result["statistics_micro"]["rows"]] == [1, 1, 2]
    assert len(result["edits"]) == 2 * 2 * 2  # n x methods x pipelines
    for row in result["edits"]:
        assert set(row["stages_s"]) == {"validate", "contexts", "targets", "keys", "solve", "write_back"}
        assert row["stages_s"]["targets"] > 0 and row["stages_s"]["contexts"] > 0  # contexts re-sampled every edit
        assert row["edit_s"] >= sum(row["stages_s"].values()) * 0.99
        assert row["eval_probes"] == row["n"] and row["edit_peak_mb"] > 0
    assert {(c["method"], c["n"]) for c in result["comparisons"]} == {
        (m, n) for m in ("ZeroUnlearn", "ZeroUnlearn-GD") for n in (2, 3)
    }
    for comparison in result["comparisons"]:
        assert comparison["max_rel_diff"] < 1e-4
        assert comparison["ratio"] == pytest.approx(comparison["per_request_s"] / comparison["ours_s"])
    for heading in ("Statistics stage", "micro-benchmark", "Edit stages", "per-request / ours"):
        assert heading in result["markdown"]


def test_random_configs():
    big = build_random_model("llama-3.2-3b", "meta")  # Llama-3.2-3B-Instruct's dimensions, no memory used
    assert sum(p.numel() for p in big.parameters()) == 3_212_749_824
    assert (
        big.config.num_hidden_layers == 28 and big.config.num_key_value_heads == 8 and big.config.vocab_size == 128256
    )
    assert big.config.rope_parameters["rope_theta"] == 500000.0 and big.lm_head.weight is big.model.embed_tokens.weight
    assert str(next(big.parameters()).dtype) == "torch.bfloat16"
    tiny = build_random_model("tiny", "cpu", vocab_size=64)
    assert tiny.config.num_hidden_layers == 30 and tiny.config.vocab_size == 64
    with pytest.raises(ValueError, match="unknown random config"):
        build_random_model("gpt-5", "cpu")


def test_parse_int_list():
    assert parse_int_list("10,50, 200") == [10, 50, 200]
    with pytest.raises(ValueError):
        parse_int_list("10,0")


@pytest.mark.slow
def test_bench_speed_cli_with_a_random_tiny_config(smollm2_path, tmp_path, capsys):
    """``zerounlearn bench-speed --random-config tiny``: the GPU command's code path, on the CPU."""
    from zerounlearn_editor.cli import main

    out = tmp_path / "speed.json"
    hparams = REPO_ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml"
    assert (
        main(
            [
                "bench-speed",
                "--hparams",
                str(hparams),
                "--random-config",
                "tiny",
                "--n",
                "2",
                "--device",
                "cpu",
                "--stats-passages",
                "8",
                "--micro-passages",
                "4",
                "--out",
                str(out),
                "--no-progress",
                "--data",
                str(write_tiny_counterfact(tmp_path / "counterfact.json")),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["environment"]["model"] == "random-tiny" and len(result["comparisons"]) == 2
    assert all(c["max_rel_diff"] < 1e-4 for c in result["comparisons"])
    assert "per-request / ours" in capsys.readouterr().out
