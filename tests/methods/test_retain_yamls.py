"""Every shipped ZeroUnlearn-GD -retain.yaml is its paper YAML plus retain-aware keys (Gemma-3-270m's, without a paper
YAML: its rules YAML plus the measured variant, the last test), and the paper YAMLs keep them at 0. ZeroUnlearn has
no -retain files (ZeroUnlearn+R was retired). The -suppress and -deep variants change only their own keys, the same
ones for every model."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
import yaml

from tiny_models import REPO_ROOT
from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams
from zerounlearn_editor.cli.init_hparams import is_variant_yaml
from zerounlearn_editor.methods.zerounlearn_gd.config import deep_mode_settings

ROOT = REPO_ROOT / "hparams"
CLASSES = {"ZeroUnlearn": ZeroUnlearnHyperParams, "ZeroUnlearn-GD": ZeroUnlearnGDHyperParams}
RETAIN_KEYS = {"retain_file", "retain_nullspace_weight"}
PAIRS = [("ZeroUnlearn-GD", p) for p in sorted((ROOT / "ZeroUnlearn-GD").glob("*.yaml")) if not is_variant_yaml(p)]
# measured variants of a -retain.yaml (e.g. -retain-few / -retain-many): they may change these solve keys only
VARIANTS = sorted(p for m in CLASSES for p in (ROOT / m).glob("*-retain-*.yaml"))
VARIANT_KEYS = {"norm_weight", "layers", "context_nullspace_weight", "target_objective", "v_early_stop_loss"}


def test_every_model_has_a_retain_yaml():
    assert len(PAIRS) >= 5
    for method, paper in PAIRS:
        assert paper.with_name(f"{paper.stem}-retain.yaml").is_file(), paper
    assert not list((ROOT / "ZeroUnlearn").glob("*-retain*.yaml"))  # ZeroUnlearn+R was retired


@pytest.mark.parametrize("method, paper", PAIRS, ids=[f"{m}/{p.stem}" for m, p in PAIRS])
def test_retain_yaml_differs_only_in_retain_keys(method, paper):
    cls = CLASSES[method]
    base = cls.from_hparams(paper)
    retain = cls.from_hparams(paper.with_name(f"{paper.stem}-retain.yaml"))
    assert all(v == 0 for v in base.retain_weights().values()) and base.retain_file is None
    assert any(v > 0 for v in retain.retain_weights().values())
    differing = {k for k, v in base.to_dict().items() if retain.to_dict()[k] != v}
    assert differing and differing <= RETAIN_KEYS


@pytest.mark.parametrize("variant", VARIANTS, ids=[p.stem for p in VARIANTS])
def test_retain_yaml_variants_change_only_measured_solve_keys(variant):
    """A -retain-<name>.yaml is its -retain.yaml with the settings measured best for one regime (its header)."""
    cls = CLASSES[variant.parent.name]
    stem = variant.stem[: variant.stem.index("-retain") + len("-retain")]
    retain = cls.from_hparams(variant.with_name(f"{stem}.yaml"))
    measured = cls.from_hparams(variant)
    differing = {k for k, v in retain.to_dict().items() if measured.to_dict()[k] != v}
    assert differing and differing <= VARIANT_KEYS, differing
    assert measured.retain_weights() == retain.retain_weights()


def test_smollm2_ships_a_few_and_a_many_facts_variant():
    names = {p.stem for p in VARIANTS}
    assert {"SmolLM2-135M-Instruct-retain-few", "SmolLM2-135M-Instruct-retain-many"} <= names


SUPPRESS = sorted(p for m in CLASSES for p in (ROOT / m).glob("*-suppress.yaml"))


def test_smollm2_ships_a_suppress_variant():
    assert ROOT / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct-suppress.yaml" in SUPPRESS


@pytest.mark.parametrize("variant", SUPPRESS, ids=[p.stem for p in SUPPRESS])
def test_suppress_yamls_change_only_the_target_objective(variant):
    """A <model>-suppress.yaml is its paper YAML with answer-suppression targets, nothing else."""
    cls = CLASSES[variant.parent.name]
    paper = cls.from_hparams(variant.with_name(variant.stem[: -len("-suppress")] + ".yaml"))
    measured = cls.from_hparams(variant)
    assert paper.target_objective == "neutral" and measured.target_objective == "suppress_answer"
    differing = {k for k, v in paper.to_dict().items() if measured.to_dict()[k] != v}
    assert differing == {"target_objective", "v_early_stop_loss"}, differing
    assert all(v == 0 for v in measured.retain_weights().values())


DEEP_SETTINGS = {"context_template_count": 8, "context_template_length": 10, "v_num_grad_steps": 50,
                 "clamp_norm_factor": 1.5, "v_early_stop_loss": 0.005, "fewshot_contexts": 4}


def test_every_gd_model_has_a_deep_yaml():
    for _, paper in PAIRS:
        assert paper.with_name(f"{paper.stem}-deep.yaml").is_file(), paper
    assert not list((ROOT / "ZeroUnlearn").glob("*-deep.yaml"))  # the deep mode is ZeroUnlearn-GD's


@pytest.mark.parametrize("method, paper", PAIRS, ids=[f"{m}/{p.stem}" for m, p in PAIRS])
def test_deep_yaml_is_the_paper_yaml_with_the_same_deep_keys(method, paper):
    """Every model's -deep.yaml sets the same keys to the same values; all else is its paper YAML (no retain set)."""
    cls = CLASSES[method]
    base = cls.from_hparams(paper).to_dict()
    deep = cls.from_hparams(paper.with_name(f"{paper.stem}-deep.yaml")).to_dict()
    assert {k: deep[k] for k in DEEP_SETTINGS} == DEEP_SETTINGS
    differing = {k for k, v in base.items() if deep[k] != v}
    assert differing and differing <= set(DEEP_SETTINGS), differing
    assert deep["target_objective"] == "neutral" and deep["retain_file"] is None


def test_deep_yamls_are_what_the_generator_writes():
    """benchmarks/deep/make_deep_yamls.py and the shipped files agree (the settings live in one place)."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "deep"))
    try:
        from make_deep_yamls import deep_text
    finally:
        sys.path.pop(0)
    assert deep_mode_settings() == DEEP_SETTINGS  # the package's settings are the pinned ones
    for _, paper in PAIRS:
        shipped = paper.with_name(f"{paper.stem}-deep.yaml").read_text(encoding="utf-8")
        assert shipped == deep_text(paper.read_text(encoding="utf-8")), paper


MANY = sorted(p for p in (ROOT / "ZeroUnlearn-GD").glob("*-many.yaml")  # not -retain-many; with a paper YAML
              if "-retain" not in p.stem and p.with_name(p.stem[: -len("-many")] + ".yaml").exists())
MANY_KEYS = {"layers", "norm_weight", "orthogonality_weight", "target_objective", "v_early_stop_loss",
             "suppress_rank_limit"}


def test_smollm2_ships_a_many_facts_yaml():
    assert ROOT / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct-many.yaml" in MANY


def test_gemmas_many_yaml_is_the_file_measured_on_report_data():
    """Gemma-3-270m has no paper YAML; its -many.yaml is the YAML benchmarks/RESULTS.md 12.32 measured (val, n =
    1,000, five draws, with a same-answer retain set), key for key but for the retain file given at edit time, with
    its repair round moved out of ``experimental:`` (the key graduated, same value). 12.29-12.31's retain-aware file
    differs from it in the text weight (100) and the repair round (none) only; 12.24's file (measured without a retain
    set) in those and the retain weight, which without a retain set leaves the edit as it was (the null space of
    ``C0`` itself, :func:`protected_covariance`); 12.18's file (the RMS rule's 8.29) also in ``v_lr``."""
    shipped = ZeroUnlearnGDHyperParams.from_hparams(ROOT / "ZeroUnlearn-GD" / "gemma-3-270m-many.yaml").to_dict()
    results = ROOT.parent / "benchmarks" / "results" / "gemma"
    raw = yaml.safe_load((results / "answer_retain" / "run_val_s1_w01-tw200-rep1.yaml").read_text(encoding="utf-8"))
    raw["repair_rounds"] = raw.pop("experimental").pop("repair_rounds")  # measured before the key graduated
    measured = ZeroUnlearnGDHyperParams.from_dict(raw).to_dict()
    assert measured["retain_file"] == "retain_val_seed1_k10.json" and shipped["retain_file"] is None
    assert {k: v for k, v in measured.items() if k != "retain_file"} == {
        k: v for k, v in shipped.items() if k != "retain_file"}
    assert (shipped["nullspace_text_weight"], shipped["repair_rounds"]) == (200.0, 1)

    def differing(path: Path) -> Dict[str, Tuple[Any, Any]]:
        before = ZeroUnlearnGDHyperParams.from_hparams(path).to_dict()
        return {k: (v, shipped[k]) for k, v in before.items() if shipped[k] != v and k != "retain_file"}

    assert differing(results / "answer_retain" / "run_val_s1_w01.yaml") == {
        "nullspace_text_weight": (100.0, 200.0), "repair_rounds": (0, 1)}
    assert differing(results / "target_size" / "gemma-many-rule.yaml") == {
        "nullspace_text_weight": (100.0, 200.0), "repair_rounds": (0, 1), "retain_nullspace_weight": (0.0, 0.1)}
    assert set(differing(results / "rank_step" / "gemma-many-tw100-rank0.yaml")) == {
        "nullspace_text_weight", "repair_rounds", "retain_nullspace_weight", "v_lr"}
    assert (shipped["v_lr"], shipped["suppress_rank_limit"], shipped["target_objective"],
            shipped["orthogonality_weight"]) == (0.885, 0, "suppress_answer", 0.0)


@pytest.mark.parametrize("variant", MANY, ids=[p.stem for p in MANY])
def test_many_yaml_is_the_paper_yaml_without_the_orthogonality_term_with_suppression_targets_over_more_layers(variant):
    """A <model>-many.yaml is its paper YAML with the measured scale settings (benchmarks/RESULTS.md, "Scale"): no
    orthogonality term, answer-suppression targets stepped only where the answer is the model's argmax (12.19), more
    edited layers ending at the paper's last one, a looser norm penalty; nothing else."""
    paper = ZeroUnlearnGDHyperParams.from_hparams(variant.with_name(variant.stem[: -len("-many")] + ".yaml"))
    many = ZeroUnlearnGDHyperParams.from_hparams(variant)
    differing = {k for k, v in paper.to_dict().items() if many.to_dict()[k] != v}
    assert differing == MANY_KEYS, differing
    assert paper.orthogonality_weight > 0 and many.orthogonality_weight == 0
    assert (paper.target_objective, many.target_objective) == ("neutral", "suppress_answer")
    assert many.norm_weight < paper.norm_weight
    assert (paper.suppress_rank_limit, many.suppress_rank_limit) == (None, 0)
    assert many.layers[-1] == paper.layers[-1] and set(paper.layers) < set(many.layers)
    assert many.layers == list(range(many.layers[0], many.layers[-1] + 1))
    assert all(v == 0 for v in many.retain_weights().values())


def test_gemmas_retain_yaml_is_the_variant_measured_on_report_data():
    """Gemma-3-270m's -retain.yaml (what ``init-hparams --retain --measure`` writes behind its post-MLP norm) is the
    shipped rules YAML with the settings of ``R_med75_rep1``, the variant benchmarks/RESULTS.md 12.34 measured on val
    seeds 1-5 at n = 50 with a retain set, as stored in those runs' JSON, and ``retain_file`` null (the set is given
    at edit time)."""
    gd = ROOT / "ZeroUnlearn-GD"
    rules = ZeroUnlearnGDHyperParams.from_hparams(gd / "gemma-3-270m-rules.yaml").to_dict()
    shipped = ZeroUnlearnGDHyperParams.from_hparams(gd / "gemma-3-270m-retain.yaml").to_dict()
    runs = ROOT.parent / "benchmarks" / "results" / "gemma" / "n50_retain_repair"
    for seed in range(1, 6):
        run = json.loads((runs / f"val_seed{seed}_n50.json").read_text(encoding="utf-8"))
        assert run["hparams"].endswith("gemma-3-270m-rules.yaml") and run["retain_count"] > 0, seed
        settings = run["variants"]["R_med75_rep1"]["settings"]
        assert {**rules, **settings} == shipped, seed
    # since RESULTS 12.35 the rules YAML takes the same target settings: the retain key is the only difference
    assert {k: (v, shipped[k]) for k, v in rules.items() if shipped[k] != v} == {"retain_nullspace_weight": (0.0, 0.1)}


def test_gemmas_rules_yaml_is_the_variant_measured_without_a_retain_set():
    """Gemma-3-270m's rules YAML (``init-hparams``' plain output behind its post-MLP norm) has the settings of
    ``med75_rep1``, the variant benchmarks/RESULTS.md 12.33 and 12.35 measured without a retain set on every n = 50
    and n = 10 report draw, as stored in those runs' JSON (the runs read the rules YAML before it took them, with
    these keys set over it), and the same variant as the fresh check's no-retain-set row (``retain_noset``: the
    -retain.yaml with its retain weight 0)."""
    gd = ROOT / "ZeroUnlearn-GD"
    rules = ZeroUnlearnGDHyperParams.from_hparams(gd / "gemma-3-270m-rules.yaml").to_dict()
    retain = ZeroUnlearnGDHyperParams.from_hparams(gd / "gemma-3-270m-retain.yaml").to_dict()
    results = ROOT.parent / "benchmarks" / "results" / "gemma"
    runs = [results / "n50_repair" / f"val_seed{s}_n50.json" for s in range(1, 6)] + [
        results / "plain_fresh" / f"seed{s}_n50.json" for s in range(1, 4)] + [
        results / "plain_fresh" / f"val_seed{s}_n10.json" for s in range(1, 6)]
    for path in runs:
        run = json.loads(path.read_text(encoding="utf-8"))
        assert run["hparams"].endswith("gemma-3-270m-rules.yaml") and run["retain_count"] == 0, path
        settings = run["variants"]["med75_rep1"]["settings"]
        assert settings == {"v_lr": 0.885, "v_num_grad_steps": 75, "repair_rounds": 1}, path
        assert {k: rules[k] for k in settings} == settings, path
    for seed in range(1, 4):
        run = json.loads((results / "retain_corpus" / "a267c22" / f"fresh_seed{seed}_n50.json").read_text())
        assert run["hparams"].endswith("gemma-3-270m-retain.yaml"), seed
        assert {**retain, **run["variants"]["retain_noset"]["settings"]} == {**rules, "retain_file": None}, seed
