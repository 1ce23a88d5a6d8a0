"""``zerounlearn init-hparams``: the depth-scaled restoration window of ``--layers auto`` (``--trace-window``), the
opt-in variants ``--many`` / ``--deep`` / ``--retain``, and a model built from its config when no trace runs."""
from __future__ import annotations

import pytest
import yaml

from tiny_models import tiny_llama, tiny_tokenizer, write_tiny_counterfact
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.harness import causal_trace as trace_module
from zerounlearn_editor.harness.causal_trace import depth_scaled_window, suggest_window
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.variants import variant_settings


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _folder(tok, tmp_path, layers: int):
    folder = tmp_path / f"tiny{layers}"
    tiny_llama(tok, seed=0, layers=layers).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("layers, window", [(1, 1), (4, 1), (12, 3), (18, 4), (28, 6), (30, 6), (48, 10), (80, 17)])
def test_the_window_is_romes_ten_of_48_layers_scaled_to_the_depth(layers, window):
    assert depth_scaled_window(layers) == window  # 12 layers: 2.5 rounds up
    with pytest.raises(ValueError, match="num_layers must be at least 1"):
        depth_scaled_window(0)


def test_auto_layers_trace_the_mlp_at_the_depth_scaled_window(tok, tmp_path, monkeypatch, capsys):
    """Gemma-3-270m (18 layers) at the fixed window 10 gave a plateau and an arbitrary pick (RESULTS section 12): a
    fresh trace restores round(10 x layers / 48) MLP outputs together, or --trace-window's, MLP only."""
    folder = _folder(tok, tmp_path, 12)
    data = write_tiny_counterfact(tmp_path / "cf.json")
    seen = []

    def recording(model, tok_, facts, settings, **kw):
        result = real(model, tok_, facts, settings.__class__(**{**settings.__dict__, "samples": 2}), **kw)
        seen.append((settings.window, tuple(kw.get("kinds", ())), result))
        return result

    real = trace_module.trace_facts
    monkeypatch.setattr(trace_module, "trace_facts", recording)
    for extra, window, rule in (([], 3, "10 x layers / 48"), (["--trace-window", "1"], 1, "--trace-window")):
        out = tmp_path / f"auto{window}.yaml"
        assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "auto",
                         "--trace-data", str(data), "--trace-n", "3", "--include-unknown", "--width", "2",
                         "--out", str(out), "--no-progress", *extra]) == 0
        traced_window, kinds, result = seen[-1]
        assert (traced_window, kinds) == (window, ("mlp",)) and "residual" not in result
        assert f"restoration window {window} ({rule})" in out.read_text().splitlines()[0]
        assert yaml.safe_load(out.read_text())["layers"] == suggest_window(result["indirect_effect"]["mlp"][:-1], 2)


def test_trace_window_is_read_only_by_a_fresh_trace(tok, tmp_path, caplog):
    folder = _folder(tok, tmp_path, 4)
    for extra, message in ((["--layers", "1,2", "--trace-window", "2"], "--trace-window is read by a fresh trace"),
                           (["--trace-window", "0"], "--trace-window must be at least 1, got 0")):
        out = tmp_path / "x.yaml"
        assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--out", str(out),
                         *extra]) == 2
        assert message in caplog.text and not out.exists()


@pytest.mark.parametrize("variant", ["many", "deep", "retain"])
def test_a_variant_is_the_plain_yaml_with_its_rule_and_loads_strictly(tok, tmp_path, variant):
    folder = _folder(tok, tmp_path, 30)
    plain, out = tmp_path / "plain.yaml", tmp_path / f"{variant}.yaml"
    common = ["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "16,17,18"]
    assert cli_main([*common, "--out", str(plain)]) == 0
    assert cli_main([*common, f"--{variant}", "--set", "v_lr=0.25", "--out", str(out)]) == 0
    base = yaml.safe_load(plain.read_text())
    expected = {**base, **variant_settings(variant, base, 30), "v_lr": 0.25}  # --set still last
    assert yaml.safe_load(out.read_text()) == expected
    header = out.read_text().splitlines()
    assert f"derived by init-hparams --{variant} from the model's config; not measured on real weights" in header[2]
    ZeroUnlearnGDHyperParams.from_hparams(out)  # strict
    if variant == "many":
        assert expected["layers"] == list(range(12, 19)) and expected["target_objective"] == "suppress_answer"


def test_many_and_retain_together_write_the_retain_many_rule(tok, tmp_path):
    folder = _folder(tok, tmp_path, 30)
    plain, out = tmp_path / "plain.yaml", tmp_path / "retain-many.yaml"
    common = ["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "16,17,18"]
    assert cli_main([*common, "--out", str(plain)]) == 0
    assert cli_main([*common, "--retain", "--many", "--out", str(out)]) == 0
    base = yaml.safe_load(plain.read_text())
    written = yaml.safe_load(out.read_text())
    assert written == {**base, **variant_settings("retain-many", base, 30)}
    assert written["layers"] == list(range(12, 19)) and written["v_early_stop_loss"] == 0.003
    assert written["orthogonality_weight"] == base["orthogonality_weight"]
    assert written["context_nullspace_weight"] == 0.1 and written["retain_nullspace_weight"] == 0.1
    header = out.read_text().splitlines()
    assert "derived by init-hparams --many --retain from the model's config; not measured" in header[2]
    assert "many-facts retain-aware keys (--many --retain)" in header[0]
    ZeroUnlearnGDHyperParams.from_hparams(out)  # strict


@pytest.mark.parametrize("flags, message", [
    (["--many", "--deep"], "--many and --deep together are refused: both set the targets"),
    (["--retain", "--many", "--deep"], "--many and --deep together are refused: both set the targets"),
    (["--deep", "--retain"], "--deep and --retain together are refused: no shipped file or measurement"),
])
def test_two_variants_are_refused_before_the_model_loads(tok, tmp_path, monkeypatch, caplog, flags, message):
    from zerounlearn_editor.cli import init_hparams
    from zerounlearn_editor.support import model_zoo

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the bad options were found")

    monkeypatch.setattr(model_zoo, "load_model_and_tokenizer", refuse)
    monkeypatch.setattr(init_hparams, "load_model_structure", refuse)
    out = tmp_path / "x.yaml"
    assert cli_main(["init-hparams", "--model", str(tmp_path), "--method", "ZeroUnlearn-GD", "--layers", "1,2",
                     *flags, "--out", str(out)]) == 2
    assert message in caplog.text and not out.exists()


def test_given_layers_need_only_the_models_config(tok, tmp_path):
    """No trace, no weights: a folder with only config.json (what the shipped -many files are derived from)."""
    full = _folder(tok, tmp_path, 6)
    bare = tmp_path / "config-only"
    bare.mkdir()
    (bare / "config.json").write_text((full / "config.json").read_text())
    outs = {}
    for name, folder in (("bare", bare), ("full", full)):
        outs[name] = tmp_path / f"{name}.yaml"
        assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "2,3",
                         "--many", "--out", str(outs[name])]) == 0
    bare_config, full_config = (yaml.safe_load(p.read_text()) for p in (outs["bare"], outs["full"]))
    assert bare_config == {**full_config, "model_name": str(bare)}
