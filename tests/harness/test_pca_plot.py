"""``zerounlearn pca`` and ``zerounlearn plot`` on tiny models / tiny summaries."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.harness.pca_shift import PcaConfig, pca_numbers, run_pca
from zerounlearn_editor.harness.summary_plot import collect_points, format_points


def test_pca_numbers_by_hand():
    base = torch.tensor([[2.0, 0.0, 0.0], [-2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, -1.0, 0.0]], dtype=torch.float64)
    shifted = base + torch.tensor([0.0, 0.0, 3.0], dtype=torch.float64)  # moves out of the PC plane
    inplane = base + torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    out = pca_numbers(base, {"up": shifted, "side": inplane, "none": base.clone()})
    assert out["explained_variance_ratio"] == pytest.approx([0.8, 0.2])
    spread = (10 / 4) ** 0.5  # sum of squared distances to the centre = 10
    assert out["base_spread"] == pytest.approx(spread)
    assert out["methods"]["up"]["mean_displacement"] == pytest.approx(3 / spread)
    assert out["methods"]["up"]["moved_variance_fraction"] == pytest.approx(4 * 9 / 10)
    assert out["methods"]["up"]["displacement_in_pc_plane"] == pytest.approx(0.0, abs=1e-12)
    assert out["methods"]["side"]["displacement_in_pc_plane"] == pytest.approx(1.0)
    assert out["methods"]["none"] == {
        "mean_displacement": 0.0,
        "moved_variance_fraction": 0.0,
        "displacement_in_pc_plane": 0.0,
    }
    assert torch.allclose(torch.tensor(out["coords"]["up"]), torch.tensor(out["coords"]["base"]))  # same 2-D picture
    assert len(out["coords"]["base"]) == 4 and all(len(p) == 2 for p in out["coords"]["base"])


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("pca")
    corpus = write_corpus(root / "corpus.jsonl")
    for alg in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        path = root / "hparams" / alg / "tiny.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(tiny_hparams_dict(root / "stats", corpus, alg_name=alg)))
    ga = root / "hparams" / "GA" / "tiny.yaml"
    ga.parent.mkdir(parents=True)
    ga.write_text(
        yaml.safe_dump(dict(alg_name="GA", model_name="tiny", device="cpu", layers=[1, 2], num_steps=3, lr=1e-2))
    )
    return {
        "root": root,
        "main": root / "hparams" / "ZeroUnlearn" / "tiny.yaml",
        "data": write_tiny_counterfact(root / "cf.json"),
    }


def test_run_pca_on_a_tiny_llama(ws, tmp_path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = PcaConfig(hparams=str(ws["main"]), data=str(ws["data"]), out=str(tmp_path / "pca.png"), n=5, seed=1,
                       methods=["ZeroUnlearn", "GA", "MEMIT"], progress=False)
    result = run_pca(config, model=model, tok=tok)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    stored = json.loads((tmp_path / "pca.json").read_text())
    assert stored["layer"] == 2 and stored["module"] == "model.layers.2.mlp" and stored["n"] == 5
    assert set(stored["methods"]) <= {"ZeroUnlearn", "GA"} and "ZeroUnlearn" in stored["methods"]
    assert set(stored["methods"]) | set(stored["skipped"]) == {"ZeroUnlearn", "GA", "MEMIT"}
    for numbers in stored["methods"].values():
        assert numbers["mean_displacement"] > 0 and 0 <= numbers["displacement_in_pc_plane"] <= 1
    assert all(len(v) == 5 for v in stored["coords"].values())
    again = run_pca(config, model=model, tok=tok)
    for name, numbers in result["methods"].items():
        assert again["methods"][name] == pytest.approx(numbers)
    pytest.importorskip("matplotlib")
    assert (tmp_path / "pca.png").read_bytes()[:4] == b"\x89PNG"


def _summary(path: Path, name: str, methods):
    metrics = {
        m: {
            "status": "ok",
            "seeds": [1, 2],
            "metrics": {k: {"mean": v, "std": s, "n": 2, "values": [v - s, v + s]} for k, (v, s) in vals.items()},
        }
        for m, vals in methods.items()
    }
    metrics["ROME"] = {"status": "skipped", "seeds": [], "metrics": {}, "reason": "skipped"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "methods": metrics}))
    return path


def test_plot_points_and_cli(tmp_path, capsys):
    a = _summary(
        tmp_path / "a" / "summary.json",
        "lr1",
        {
            "GA": {"eff": (40.0, 2.0), "spe": (80.0, 1.0), "ppl": (20.0, 0.5)},
            "ZeroUnlearn": {"eff": (5.0, 1.0), "spe": (90.0, 2.0)},
        },
    )
    b = _summary(
        tmp_path / "b" / "summary.json", None, {"GA": {"eff": (10.0, 3.0), "spe": (60.0, 4.0), "ppl": (35.0, 1.0)}}
    )
    points = collect_points([a, b])
    assert [(p["run"], p["method"]) for p in points] == [("lr1", "GA"), ("lr1", "ZeroUnlearn"), ("b", "GA")]
    assert points[0]["eff"] == 40.0 and points[0]["spe_std"] == 1.0 and points[1]["ppl"] is None
    assert collect_points([a], ["ZeroUnlearn"])[0]["method"] == "ZeroUnlearn"
    assert "| lr1 | GA | 40.0 ± 2.0 | 80.0 ± 1.0 | 20.00 ± 0.50 | 2 |" in format_points(points)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"methods": {"GA": {"metrics": {"eff": {"mean": 1}}}}}))
    with pytest.raises(ValueError, match=r"bad.json: methods.GA.metrics.eff needs 'mean' and 'std'"):
        collect_points([bad])
    pytest.importorskip("matplotlib")
    out = tmp_path / "fronts.png"
    assert cli_main(["plot", str(a), str(b), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "| b | GA | 10.0 ± 3.0" in capsys.readouterr().out


def test_plot_reads_surgical_results_per_variant_and_seed(tmp_path, capsys):
    results = {"run": {"n": 50}, "seeds": {
        "1": {"base": {"metrics": {"eff": 100.0, "spe": 20.0, "ppl": 30.0}},
              "GD": {"metrics": {"eff": 6.0, "spe": 10.0, "ppl": 32.0}}},
        "2": {"base": {"metrics": {"eff": 100.0, "spe": 24.0, "ppl": 30.0}},
              "GD": {"metrics": {"eff": 8.0, "spe": 14.0, "ppl": 33.0}}},
        "3": {"GD": {"metrics": {"eff": 100.0, "spe": 0.0, "ppl": None}}}}}
    path = tmp_path / "sweep" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(results))
    points = {p["method"]: p for p in collect_points([path], seeds=[1, 2])}
    assert set(points) == {"base", "GD"}
    gd = points["GD"]
    assert gd["run"] == "sweep" and gd["seeds"] == 2
    assert gd["eff"] == pytest.approx(7.0) and gd["eff_std"] == pytest.approx(2 ** 0.5)
    assert gd["spe"] == pytest.approx(12.0) and gd["ppl"] == pytest.approx(32.5)
    every = {p["method"]: p for p in collect_points([path])}  # all seeds; a missing PPL is skipped, not zero
    assert every["GD"]["seeds"] == 3 and every["GD"]["ppl"] == pytest.approx(32.5)
    assert [p["method"] for p in collect_points([path], ["GD"], [1])] == ["GD"]
    with pytest.raises(ValueError, match="no variant has a result for seeds"):
        collect_points([path], seeds=[9])
    pytest.importorskip("matplotlib")
    out = tmp_path / "knobs.png"
    assert cli_main(["plot", str(path), "--seeds", "1-2", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "| sweep | GD | 7.0 ± 1.4 | 12.0 ± 2.8 | 32.50 ± 0.71 | 2 |" in capsys.readouterr().out
