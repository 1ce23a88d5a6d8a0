"""Retired knobs fail with a message that says they were retired and what to use instead, before any
heavy work; experiments enter only as declared keys under ``experimental:``."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Dict

import pytest
import yaml

from tiny_models import REPO_ROOT, tiny_hparams_dict
from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.retired_keys import GRADUATED_EXPERIMENTAL_KEYS, RETIRED_KEYS
from zerounlearn_editor.harness.bench_config import RETIRED_METHODS, BenchConfigError, parse_methods
from zerounlearn_editor.harness.method_rows import default_registry

ROOT = REPO_ROOT
# what each retired entry's message must point to (the replacement)
REPLACEMENT = {
    "targets_optimizer: lbfgs": "targets_optimizer: adam_kv",
    "target_retain_weight": "retain_nullspace_weight",
    "target_retain_neighbours": "retain_nullspace_weight",
    "target_retain_scale": "retain_nullspace_weight",
    "utility_penalty_weight": "nullspace_threshold",
    "retain_penalty_weight": "retain_nullspace_weight",
    "projection_utility_weight": "delete the key",
    "context_positions": "delete the key",
    "retain_weight": "ZeroUnlearn-GD with retain_nullspace_weight",
    "projection_retain_weight": "ZeroUnlearn-GD with retain_nullspace_weight",
    "context_seed": "always sampled with seed 0",
    "mom2_batch_size": "always reads 16 passages",
    "projection_eps": "exact projector P = I - V V^T",
    "gd_tolerance": "always stops at a relative change of 1e-10",
    "forgotten_protection_weight": "delete the key",
}


def _config(tmp_path: Path, entry: str, alg: str) -> dict:
    key, _, value = entry.partition(": ")
    return tiny_hparams_dict(tmp_path, tmp_path / "c.jsonl", alg_name=alg, **{key: value or 0.0})


def test_every_retired_entry_names_its_replacement():
    assert set(REPLACEMENT) == set(RETIRED_KEYS)


@pytest.mark.parametrize("entry", sorted(RETIRED_KEYS))
@pytest.mark.parametrize(
    "cls", [ZeroUnlearnHyperParams, ZeroUnlearnGDHyperParams], ids=["ZeroUnlearn", "ZeroUnlearn-GD"]
)
def test_a_retired_key_in_a_file_is_an_error_naming_file_reason_and_replacement(tmp_path, entry, cls):
    path = tmp_path / "hp.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, entry, cls.ALG_NAME)), encoding="utf-8")
    with pytest.raises(HParamsError) as info:
        cls.from_hparams(path)
    message = str(info.value)
    assert str(path) in message and f"{entry!r} was retired" in message
    assert REPLACEMENT[entry] in message
    # where the measurement that retired it lives, or (a setting every shipped YAML held at one value) that value
    assert "benchmarks/" in message or "the value of every shipped YAML" in message


def test_a_retired_key_is_named_even_with_a_paper_value():
    """``context_positions: all`` was the default: a file holding it still fails (the key is gone)."""
    config = yaml.safe_load((ROOT / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct-retain-few.yaml").read_text())
    assert "context_positions" not in config
    with pytest.raises(HParamsError, match="'context_positions' was retired: .*delete the key"):
        ZeroUnlearnGDHyperParams.from_dict(dict(config, context_positions="all"))
    with pytest.raises(HParamsError, match="'projection_utility_weight' was retired"):
        ZeroUnlearnHyperParams.from_hparams(ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml").replace(
            projection_utility_weight=0.0)


def test_a_baseline_keeps_its_own_field_of_a_retired_name():
    """GA / NPO have their own ``retain_weight`` (a loss weight): only a class without the field rejects it."""
    from zerounlearn_editor.methods.baselines import GAHyperParams

    hp = GAHyperParams.from_hparams(ROOT / "hparams" / "GA" / "SmolLM2-135M-Instruct.yaml")
    assert hp.replace(retain_weight=0.5).retain_weight == 0.5


PROTECTION = "forgotten_protection_weight"
PAPER_GD = ROOT / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct.yaml"


@pytest.mark.parametrize("where", ["top level", "experimental"])
@pytest.mark.parametrize("paper", [PAPER_GD, ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml"],
                         ids=["ZeroUnlearn-GD", "ZeroUnlearn"])
def test_the_protection_experiment_is_refused_naming_file_key_and_branch(tmp_path, where, paper):
    """Issue 47: the lifelong protection left the package; a YAML that still sets it (where the old versions
    read it, under experimental:, or where they refused it, at the top level) fails naming the file, the key and
    the branch the experiment lives on, and the numbers it lost on; 0 (off) too, since the key is gone."""
    config = yaml.safe_load(paper.read_text(encoding="utf-8"))
    for value in (1.0, 0.0):
        config.pop(PROTECTION, None)
        if where == "top level":
            config[PROTECTION] = value
        else:
            config["experimental"] = {PROTECTION: value}
        path = tmp_path / "protected.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        cls = ZeroUnlearnGDHyperParams if "GD" in paper.parent.name else ZeroUnlearnHyperParams
        with pytest.raises(HParamsError) as info:
            cls.from_hparams(path)
        message = str(info.value)
        key = PROTECTION if where == "top level" else f"experimental.{PROTECTION}"
        assert message.startswith(f"{path}: '{key}' was retired: "), message
        assert "branch experiment/forgotten-protection" in message and "benchmarks/RESULTS.md" in message
        assert "delete the key" in message and "-many.yaml" in message


def test_unlearn_refuses_the_protection_experiment_before_loading_the_model(tmp_path, monkeypatch, caplog):
    from zerounlearn_editor.cli import main

    monkeypatch.setattr("zerounlearn_editor.support.model_zoo.load_model_and_tokenizer",
                        lambda *a, **k: pytest.fail("model loaded before the check"))
    config = yaml.safe_load(PAPER_GD.read_text(encoding="utf-8"))
    config["experimental"] = {PROTECTION: 1.0}
    hparams, facts, out = tmp_path / "lifelong.yaml", tmp_path / "facts.json", tmp_path / "out"
    hparams.write_text(yaml.safe_dump(config), encoding="utf-8")
    facts.write_text(json.dumps([{"prompt": "The capital of France is", "subject": "France", "answer": "Paris"}]),
                     encoding="utf-8")
    assert main(["unlearn", "--hparams", str(hparams), "--facts", str(facts), "--out", str(out), "--save", "model",
                 "--no-progress"]) == 2
    assert f"{hparams}: 'experimental.{PROTECTION}' was retired" in caplog.text
    assert "experiment/forgotten-protection" in caplog.text and not out.exists()


def test_experimental_keys_must_be_declared(tmp_path):
    base = tiny_hparams_dict(tmp_path, tmp_path / "c.jsonl", alg_name="ZeroUnlearn-GD")
    assert ZeroUnlearnGDHyperParams.from_dict(base).experimental == {}
    assert ZeroUnlearnGDHyperParams.from_dict(dict(base, experimental={})).experimental == {}
    with pytest.raises(
        HParamsError, match=r"unknown key\(s\) \['probe'\] under 'experimental' "
        r"\(declared: none\)"
    ):
        ZeroUnlearnGDHyperParams.from_dict(dict(base, experimental={"probe": 1.0}))
    with pytest.raises(HParamsError, match="'experimental'"):
        ZeroUnlearnGDHyperParams.from_dict(dict(base, experimental=[1, 2]))

    @dataclass
    class WithExperiment(ZeroUnlearnGDHyperParams):
        EXPERIMENTAL_KEYS: ClassVar[Dict[str, str]] = {"probe": "a declared experiment"}

    hp = WithExperiment.from_dict(dict(base, experimental={"probe": 1.0}))
    assert hp.experimental == {"probe": 1.0} and hp.replace(layers=[1]).experimental == {"probe": 1.0}
    with pytest.raises(HParamsError, match=r"\['other'\] under 'experimental' \(declared: \['probe'\]\)"):
        WithExperiment.from_dict(dict(base, experimental={"other": 1.0}))


def test_zerounlearn_plus_r_is_refused_by_the_bench_and_utility_naming_gd_plus_r():
    registry = default_registry()
    assert "ZeroUnlearn+R" not in registry and "ZeroUnlearn-GD+R" in registry
    with pytest.raises(BenchConfigError, match="'ZeroUnlearn\\+R' was retired: .*use ZeroUnlearn-GD\\+R"):
        parse_methods("ZeroUnlearn-GD,zerounlearn+r", registry)
    assert set(RETIRED_METHODS) == {"ZeroUnlearn+R"}


def test_utility_refuses_zerounlearn_plus_r_before_loading_anything(tmp_path):
    from zerounlearn_editor.harness.utility import UtilityConfig, run_utility

    config = UtilityConfig(hparams=str(tmp_path / "missing.yaml"), tasks=["sst2"], methods=["ZeroUnlearn+R"],
                           out=str(tmp_path / "u.json"))
    with pytest.raises(ValueError, match="'ZeroUnlearn\\+R' was retired: .*ZeroUnlearn-GD\\+R"):
        run_utility(config)
    assert not (tmp_path / "u.json").exists()


def test_speed_bench_refuses_lbfgs_before_loading_the_model(tmp_path, monkeypatch):
    from zerounlearn_editor.harness import speed_bench

    monkeypatch.setattr(speed_bench, "_load_model", lambda *a, **k: pytest.fail("model loaded before the check"))
    cfg = speed_bench.SpeedConfig(hparams=str(ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml"),
                                  ns=[2], methods=["ZeroUnlearn"], pipelines=["ours"], device="cpu",
                                  targets_optimizers=["lbfgs"], out=str(tmp_path / "s.json"))
    with pytest.raises(HParamsError, match="--targets-optimizers 'lbfgs': .*use targets_optimizer: adam_kv"):
        speed_bench.run_speed(cfg)


def _surgical():
    spec = importlib.util.spec_from_file_location("surgical_bench", ROOT / "benchmarks" / "surgical" / "harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("key, value, fragment", [
    ("retain_k", 10, "run the variant with --retain POLICY:K"),
    ("retain_known", True, "drop the key"),
])
def test_surgical_bench_refuses_retired_variant_keys_before_the_model(tmp_path, monkeypatch, key, value, fragment):
    surgical = _surgical()
    monkeypatch.setattr(
        surgical, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded before the check")
    )
    variants = tmp_path / "v.yaml"
    variants.write_text(
        json.dumps(
            [
                {
                    "name": "v",
                    "hparams": str(ROOT / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct-retain.yaml"),
                    "retain": True,
                    key: value,
                }
            ]
        ),
        encoding="utf-8",
    )
    with pytest.raises(SystemExit, match=f"{key}.*were retired: .*{fragment}"):
        surgical.main(["--variants", str(variants), "--out", str(tmp_path / "out")])


@pytest.mark.parametrize("key", sorted(GRADUATED_EXPERIMENTAL_KEYS))
def test_a_graduated_experiment_under_experimental_fails_naming_its_key(tmp_path, key):
    """Every experiment that became a key of its own: the ``experimental:`` form is refused, naming the key."""
    base = tiny_hparams_dict(tmp_path, tmp_path / "c.jsonl", alg_name="ZeroUnlearn-GD")
    with pytest.raises(HParamsError, match=rf"'experimental\.{key}' graduated to the top-level key '{key}'.*"
                                           r"move it out of experimental:, same value"):
        ZeroUnlearnGDHyperParams.from_dict(dict(base, experimental={key: {"any": 1}}))


def test_the_neutral_step_rank_experiment_is_refused_naming_its_result(tmp_path):
    """Issue 48: the neutral-target step selection lost on report data; a file that sets it names the result and
    the branch that keeps the code."""
    base = tiny_hparams_dict(tmp_path, tmp_path / "c.jsonl", alg_name="ZeroUnlearn-GD")
    with pytest.raises(HParamsError, match=r"'experimental\.neutral_step_rank_limit' was retired: .*12\.25.*"
                                           r"branch neutral-stepped, commit 192568c"):
        ZeroUnlearnGDHyperParams.from_dict(dict(base, experimental={"neutral_step_rank_limit": 0}))
