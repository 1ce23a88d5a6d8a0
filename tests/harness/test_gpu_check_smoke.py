"""``benchmarks/gpu/gpu_check.py --device cpu --smoke`` on tiny models: every stage of the device check (statistics,
edit, bench, audit) runs and is timed, so the script cannot rot between device loans."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from tiny_models import saved_tiny_llama, tiny_hparams_dict, write_tiny_counterfact

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks/gpu/gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_smoke_run_records_every_stage_of_both_models(tmp_path: Path) -> None:
    gpu_check = _load()
    folder, corpus = saved_tiny_llama(tmp_path)
    data = write_tiny_counterfact(tmp_path / "cf.json")
    main = tmp_path / "tiny.yaml"
    main.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "unused", corpus, alg_name="ZeroUnlearn-GD")),
                    encoding="utf-8")
    out = tmp_path / "out"
    code = gpu_check.main(["--device", "cpu", "--smoke", "--out", str(out), "--models", "llama-3.2-3b-shape,tiny",
                           "--model", f"tiny={folder}", "--hparams", f"tiny={main}", "--tokenizer", str(folder),
                           "--data", str(data), "--corpus", str(corpus)])
    record = json.loads((out / "gpu_check.json").read_text())
    failed = [(r["model"], r["stage"], r.get("error")) for r in record["stages"] if r["status"] != "ok"]
    assert code == 0 and not failed
    stages = [(r["model"], r["stage"]) for r in record["stages"]]
    assert stages == [(m, s) for m in ("llama-3.2-3b-shape", "tiny")
                      for s in ("load", "statistics", "edit", "bench", "audit")]
    assert all(r["seconds"] >= 0 and r["peak_mb"] > 0 for r in record["stages"])
    edits = [r for r in record["stages"] if r["stage"] == "edit"]
    assert [r["facts"] for r in edits] == [2, 2] and all(r["edited_weights"] for r in edits)
    # the shipped Llama-3.2-3B YAML ran with this run's sizes and the random model's layers
    written = yaml.safe_load((out / "hparams/ZeroUnlearn-GD/llama-3.2-3b-shape.yaml").read_text())
    shipped = yaml.safe_load((ROOT / "hparams/ZeroUnlearn-GD/Llama-3.2-3B-Instruct.yaml").read_text())
    assert written["layers"] == shipped["layers"] and written["mom2_n_samples"] == 20
    assert written["stats_dir"] == str(out / "stats")
    for model in ("llama-3.2-3b-shape", "tiny"):
        assert (out / "bench" / model / "summary.json").is_file()
        assert (out / "audit" / model / "audit.json").is_file()
    table = (out / "gpu_check.md").read_text()
    assert "| tiny | audit | ok |" in table and "### tiny bench" in table


def test_extra_model_without_its_yaml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--hparams NAME=YAML"):
        _load().parse_args(["--out", str(tmp_path), "--model", "mine=/somewhere"])
