"""``zerounlearn init-hparams``: the scale-dependent keys by rule for a model without a YAML of its own (weights read:
a fresh ``--layers auto`` trace or ``--measure``), the shipped model's own YAML recognised, ``--unseen``."""
from __future__ import annotations

import pytest
import torch
import yaml

from arch_zoo import tiny_config_model
from tiny_models import CORPUS, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.cli.init_hparams import nearest_shipped_yaml, own_shipped_yaml
from zerounlearn_editor.engine.architectures import detect_templates
from zerounlearn_editor.engine.stats.collect import collect_second_moments
from zerounlearn_editor.harness.model_scales import measure_scales
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.scale_rules import (
    POST_NORM_MANY,
    POST_NORM_TARGETS,
    ModelScales,
    rule_post_norm_many,
    rule_post_norm_retain,
    rule_post_norm_targets,
    rule_settings,
    rule_text_weight,
)
from zerounlearn_editor.support.model_access import capture_outputs
from zerounlearn_editor.support.resources import repo_root


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _folder(tok, root, name="tiny6"):
    folder = root / name
    tiny_llama(tok, seed=0, layers=6).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("name, own", [
    ("smollm2", "SmolLM2-135M-Instruct.yaml"),
    ("/cache/models/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.yaml"),
    ("meta-llama/Llama-3.2-3B-Instruct", "Llama-3.2-3B-Instruct.yaml"),
    ("/cache/models/gemma-3-270m", None),
    ("models/tiny6", None),
])
def test_the_models_own_shipped_yaml_is_found_by_name(name, own):
    found = own_shipped_yaml("ZeroUnlearn-GD", name)
    assert (found.name if found else None) == own


def test_an_excluded_yaml_is_never_the_base(tok):
    templates = detect_templates(tiny_config_model("gpt2", tok))
    assert nearest_shipped_yaml("ZeroUnlearn-GD", templates).name == "gpt2-xl.yaml"
    excluded = nearest_shipped_yaml("ZeroUnlearn-GD", templates)
    assert nearest_shipped_yaml("ZeroUnlearn-GD", templates, exclude=excluded).name != "gpt2-xl.yaml"


def _gemma3_folder(tok, root):
    """A saved 6-layer tiny Gemma-3 (post-feedforward norm) and its tokenizer; returns ``(folder, model)``."""
    folder = root / "tiny-gemma3"
    model = tiny_config_model("gemma3", tok, layers=6)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model


def _init(folder, out, *extra):
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "2,3",
                     "--out", str(out), *extra]) == 0
    return yaml.safe_load(out.read_text()), out.read_text().splitlines()


def test_measure_writes_the_rule_settings_of_a_model_without_its_own_yaml(tok, tmp_path):
    folder = _folder(tok, tmp_path)
    plain, plain_header = _init(folder, tmp_path / "plain.yaml")
    measured, header = _init(folder, tmp_path / "measured.yaml", "--measure")
    model = tiny_llama(tok, seed=0, layers=6).eval()
    expected = rule_settings(measure_scales(model, tok, [2, 3], "model.layers.{}", "model.layers.{}.mlp.down_proj"))
    assert measured == {**plain, **expected}
    assert plain["v_lr"] == 0.1 and plain["norm_weight"] == 0.1  # without --measure: the base YAML's values
    assert any(line.startswith("# Settings by rule") for line in header)
    assert not any("by rule" in line for line in plain_header)
    assert measured["v_lr"] != plain["v_lr"]


def test_many_writes_the_suppression_targets_v_lr_by_the_median_coordinate(tok, tmp_path):
    """``--many`` (answer-suppression targets): ``v_lr`` by the residual's median coordinate, measured where the
    widened YAML edits; the other rule keys as for the plain YAML; ``--set target_objective=neutral`` keeps the RMS
    rule (benchmarks/RESULTS.md 12.24)."""
    folder = _folder(tok, tmp_path)
    many, header = _init(folder, tmp_path / "m.yaml", "--measure", "--many")
    model = tiny_llama(tok, seed=0, layers=6).eval()
    scales = measure_scales(model, tok, many["layers"], "model.layers.{}", "model.layers.{}.mlp.down_proj")
    by_median = rule_settings(scales, suppress_targets=True)
    assert by_median["v_lr"] != rule_settings(scales)["v_lr"]  # the tiny model's two rules differ
    assert many["target_objective"] == "suppress_answer"
    assert {k: many[k] for k in by_median if k != "norm_weight"} == {k: v for k, v in by_median.items()
                                                                    if k != "norm_weight"}  # -many rescales it
    assert any(line.startswith("# Settings by rule") and "median coordinate" in line for line in header)
    neutral, _ = _init(folder, tmp_path / "n.yaml", "--measure", "--many", "--set", "target_objective=neutral",
                       "--set", "suppress_rank_limit=null")
    assert neutral["v_lr"] == rule_settings(scales)["v_lr"]
    for flags in (["--many", "--retain"], ["--robust"]):  # suppression targets too, but not measured: the RMS rule
        other, _ = _init(folder, tmp_path / "o.yaml", "--measure", *flags)
        assert other["target_objective"] == "suppress_answer" and other["v_lr"] == rule_settings(scales)["v_lr"]


def test_a_shipped_models_own_yaml_keeps_the_current_output_unless_unseen(tok, tmp_path):
    folder = _folder(tok, tmp_path, "SmolLM2-135M-Instruct")
    plain, _ = _init(folder, tmp_path / "plain.yaml")
    kept, _ = _init(folder, tmp_path / "kept.yaml", "--measure")
    unseen, header = _init(folder, tmp_path / "unseen.yaml", "--measure", "--unseen")
    assert kept == plain and "nullspace_text_weight" not in plain  # the shipped file's own settings: the paper's
    model = tiny_llama(tok, seed=0, layers=6).eval()
    expected = rule_settings(measure_scales(model, tok, [2, 3], "model.layers.{}", "model.layers.{}.mlp.down_proj"))
    assert unseen == {**plain, **expected}  # no post-MLP norm: no text weight by rule
    assert "SmolLM2-135M-Instruct.yaml" not in header[0]


def test_the_text_weight_rule_needs_a_norm_after_every_edited_mlp():
    """RESULTS 12.14 on: ``{key_reach: 0.6}`` where the MLP output passes a norm (Gemma-3-270m); without one (SmolLM2
    at its traced layers 1-3 it left 3-5 of 10 facts answered) or with a layer added as is, the paper's penalty."""
    def scales(norms):
        return ModelScales(residual_rms=1.0, residual_norm=10.0, c0_medians=[0.01], key_dim=8, post_mlp_norms=norms)

    assert rule_text_weight(scales([3.0, 4.0])) == {"nullspace_text_weight": {"key_reach": 0.6}}
    assert rule_text_weight(scales(None)) == {} and rule_text_weight(scales([3.0, float("inf")])) == {}
    first = rule_text_weight(scales([1.0]))
    first["nullspace_text_weight"]["key_reach"] = 9.0
    assert rule_text_weight(scales([1.0]))["nullspace_text_weight"] == {"key_reach": 0.6}  # a fresh mapping


def test_init_hparams_writes_the_text_weight_for_a_post_norm_model_only_in_the_plain_gd_yaml(tok, tmp_path):
    """A tiny Gemma-3 (post-feedforward norm, no YAML of its own) with the weights read: the plain ZeroUnlearn-GD YAML
    gets ``{key_reach: 0.6}`` (in the header's settings by rule; it loads strictly); ``--set
    nullspace_text_weight=null`` gives the paper's penalty and nothing else changes; ``--many`` gets its own weight
    instead, a Llama without such a norm none. The plain YAML also takes the target settings measured behind such a
    norm (RESULTS 12.35): v_lr by the median coordinate, 75 steps, one repair round; a Llama's keeps the paper's."""
    folder, model = _gemma3_folder(tok, tmp_path)
    written, header = _init(folder, tmp_path / "g.yaml", "--measure")
    scales = measure_scales(model.eval(), tok, written["layers"], "model.layers.{}", "model.layers.{}.mlp.down_proj")
    assert {k: written[k] for k in POST_NORM_TARGETS} == dict(POST_NORM_TARGETS) == {"v_num_grad_steps": 75,
                                                                                    "repair_rounds": 1}
    assert written["v_lr"] == rule_settings(scales, suppress_targets=True)["v_lr"] != rule_settings(scales)["v_lr"]
    assert any("settings measured on Gemma-3-270m (gemma-3-270m-rules.yaml" in line for line in header)
    assert written["nullspace_text_weight"] == {"key_reach": 0.6}
    assert any(line.startswith("# Settings by rule") and "nullspace_text_weight" in line for line in header)
    assert ZeroUnlearnGDHyperParams.from_hparams(tmp_path / "g.yaml").nullspace_text_weight == {"key_reach": 0.6}
    paper, _ = _init(folder, tmp_path / "p.yaml", "--measure", "--set", "nullspace_text_weight=null")
    assert paper == {**written, "nullspace_text_weight": None}
    many, _ = _init(folder, tmp_path / "m.yaml", "--measure", "--many")
    assert many["nullspace_text_weight"] == 200.0  # --many's own weight behind the norm, not the key reach
    llama, llama_header = _init(_folder(tok, tmp_path), tmp_path / "l.yaml", "--measure")
    assert "nullspace_text_weight" not in llama
    assert "repair_rounds" not in llama and llama["v_num_grad_steps"] == 25  # without a norm: the paper's one edit
    assert not any("settings measured on" in line for line in llama_header)
    for flags in (["--deep"], ["--robust"]):  # variants without a measured rule keep the RMS step and one edit
        other, other_header = _init(folder, tmp_path / "o.yaml", "--measure", *flags)
        assert "repair_rounds" not in other and other["v_lr"] == rule_settings(scales)["v_lr"], flags
        assert any("not measured on real weights" in line for line in other_header), flags
    no_norm = ModelScales(residual_rms=1.0, residual_norm=10.0, c0_medians=[0.01], key_dim=8, post_mlp_norms=None)
    assert rule_post_norm_targets(no_norm) == {}  # read before the median coordinate, which these scales lack
    behind = ModelScales(residual_rms=1.0, residual_norm=10.0, c0_medians=[0.01], key_dim=8, post_mlp_norms=[1.0])
    with pytest.raises(ValueError, match="target rule behind a post-MLP norm needs residual_median_abs"):
        rule_post_norm_targets(behind)


MEASURED_MANY = {"context_template_count": 2, "context_template_length": 5, "nullspace_text_weight": 200.0,
                 "repair_rounds": 1, "retain_file": None, "retain_nullspace_weight": 0.1}


def test_a_post_norm_models_many_yaml_takes_the_measured_many_settings(tok, tmp_path):
    """The tiny Gemma-3's ``--many`` YAML with the weights read: contexts 2 of 5, threshold 10 x the rule's, text weight
    200, one repair round and the retain-aware key (it loads strictly; the header says where they were measured);
    ``--many --retain``, ``--robust``, ``--many`` with neutral targets and a Llama's ``--many`` do not take them; the
    rule gives nothing without a norm on every edited layer."""
    folder, model = _gemma3_folder(tok, tmp_path)
    many, header = _init(folder, tmp_path / "m.yaml", "--measure", "--many")
    scales = measure_scales(model.eval(), tok, many["layers"], "model.layers.{}", "model.layers.{}.mlp.down_proj")
    assert many["nullspace_threshold"] == float(f"{10 * rule_settings(scales)['nullspace_threshold']:.3g}")
    assert {k: many[k] for k in MEASURED_MANY} == MEASURED_MANY == dict(POST_NORM_MANY)
    assert ZeroUnlearnGDHyperParams.from_hparams(tmp_path / "m.yaml").repair_rounds == 1
    assert any("settings measured on Gemma-3-270m" in line for line in header)
    assert not any("not measured on real weights" in line for line in header)
    for flags in (["--many", "--retain"], ["--robust"], ["--many", "--set", "target_objective=neutral",
                                                         "--set", "suppress_rank_limit=null"]):
        other, other_header = _init(folder, tmp_path / "o.yaml", "--measure", *flags)
        assert "repair_rounds" not in other and other["context_template_count"] != 2, flags
        assert any("not measured on real weights" in line for line in other_header), flags
    llama, _ = _init(_folder(tok, tmp_path), tmp_path / "l.yaml", "--measure", "--many")
    assert "repair_rounds" not in llama and llama["context_template_count"] != 2
    no_norm = ModelScales(residual_rms=1.0, residual_norm=10.0, c0_medians=[0.01], key_dim=8, post_mlp_norms=None)
    assert rule_post_norm_many(no_norm) == {}


MEASURED_RETAIN = {"nullspace_text_weight": {"key_reach": 0.6}, "v_num_grad_steps": 75, "repair_rounds": 1,
                   "retain_file": None, "retain_nullspace_weight": 0.1}


def test_a_post_norm_models_retain_yaml_takes_the_measured_retain_settings(tok, tmp_path):
    """The tiny Gemma-3's ``--retain`` YAML with the weights read: the retain key, the text weight by key reach, v_lr
    by the median coordinate (not the RMS rule's), 75 target steps and one repair round (it loads strictly; the header
    says where they were measured); a Llama's ``--retain`` and ``--many --retain`` do not take them, and without
    ``--measure`` nothing is read; the rule gives nothing without a norm on every edited layer."""
    folder, model = _gemma3_folder(tok, tmp_path)
    kept, header = _init(folder, tmp_path / "r.yaml", "--measure", "--retain")
    scales = measure_scales(model.eval(), tok, kept["layers"], "model.layers.{}", "model.layers.{}.mlp.down_proj")
    assert {k: kept[k] for k in MEASURED_RETAIN} == MEASURED_RETAIN
    assert kept["v_lr"] == rule_settings(scales, suppress_targets=True)["v_lr"] != rule_settings(scales)["v_lr"]
    loaded = ZeroUnlearnGDHyperParams.from_hparams(tmp_path / "r.yaml")
    assert (loaded.repair_rounds, loaded.v_num_grad_steps, loaded.retain_nullspace_weight) == (1, 75, 0.1)
    assert any("settings measured on Gemma-3-270m (gemma-3-270m-rules.yaml and gemma-3-270m-retain.yaml)" in line
               for line in header)
    plain_measured, _ = _init(folder, tmp_path / "pm.yaml", "--measure")  # behind the norm as without: plain + retain
    assert kept == {**plain_measured, "retain_file": None, "retain_nullspace_weight": 0.1}
    assert not any("not measured on real weights" in line for line in header)
    mine, mine_header = _init(folder, tmp_path / "s.yaml", "--measure", "--retain", "--set", "v_lr=0.3", "--set",
                              "v_num_grad_steps=10", "--set", "repair_rounds=0", "--set", "kl_factor=0.5")
    assert (mine["v_lr"], mine["v_num_grad_steps"], mine["repair_rounds"]) == (0.3, 10, 0)  # --set wins
    rules_line = next(line for line in mine_header if line.startswith("# Settings by rule"))
    assert rules_line.endswith(f" --set replaced keys set by rule: v_lr {kept['v_lr']} -> 0.3, v_num_grad_steps 75 "
                               "-> 10, repair_rounds 1 -> 0.")  # kl_factor is no rule's key: not named
    assert not any("--set replaced keys" in line for line in header)
    plain, _ = _init(folder, tmp_path / "p.yaml", "--retain")  # nothing measured: the base YAML's keys
    assert "repair_rounds" not in plain and plain["v_num_grad_steps"] == 25
    both, _ = _init(folder, tmp_path / "b.yaml", "--measure", "--many", "--retain")
    assert "repair_rounds" not in both and both.get("nullspace_text_weight") is None
    llama_folder = _folder(tok, tmp_path)
    llama, llama_header = _init(llama_folder, tmp_path / "l.yaml", "--measure", "--retain")
    llama_plain, _ = _init(llama_folder, tmp_path / "lp.yaml", "--measure")  # without a norm: the retain keys only
    assert llama == {**llama_plain, "retain_file": None, "retain_nullspace_weight": 0.1}
    assert any("not measured on real weights" in line for line in llama_header)
    no_norm = ModelScales(residual_rms=1.0, residual_norm=10.0, c0_medians=[0.01], key_dim=8, post_mlp_norms=None,
                          residual_median_abs=0.5)
    assert rule_post_norm_retain(no_norm) == {}


def _contexts(config):
    return {k: config[k] for k in ("context_template_count", "context_template_length")}


@pytest.mark.parametrize("variant", [None, "many", "retain", "deep"])
def test_the_rules_keep_the_base_yamls_context_prefixes(tok, tmp_path, variant):
    """Without a post-MLP norm the context prefixes are not set by rule (SmolLM2's 2 of 5 cost Gemma's plain YAML
    perplexity, RESULTS 12.5): with --measure a Llama's are what the same command writes without it, for the paper
    YAML and every variant (behind a norm --many takes 2 of 5: the test above)."""
    folder = _folder(tok, tmp_path)
    flags = [f"--{variant}"] if variant else []
    plain, _ = _init(folder, tmp_path / "plain.yaml", *flags)
    measured, header = _init(folder, tmp_path / "measured.yaml", "--measure", *flags)
    assert _contexts(measured) == _contexts(plain)
    if variant is None:
        assert _contexts(measured) == {"context_template_count": 5, "context_template_length": 10}
    assert not any("Context prefixes" in line for line in header)


def test_a_shipped_models_own_yaml_keeps_its_contexts(tok, tmp_path):
    """SmolLM2's own YAML ships: with --measure (no rules) the contexts are the base file's, as without it."""
    folder = _folder(tok, tmp_path, "SmolLM2-135M-Instruct")
    kept, header = _init(folder, tmp_path / "kept.yaml", "--measure")
    base = yaml.safe_load((repo_root() / "hparams" / "ZeroUnlearn-GD" / "Llama-3.2-3B-Instruct.yaml").read_text())
    assert "Llama-3.2-3B-Instruct.yaml" in header[0]  # the nearest shipped YAML of a 6-layer Llama
    assert _contexts(kept) == _contexts(base) == {"context_template_count": 5, "context_template_length": 10}
    assert not any("by rule" in line for line in header)


def test_measured_scales_are_the_residual_and_key_statistics(tok, tmp_path):
    model = tiny_llama(tok, seed=1, layers=4).eval()
    corpus = write_corpus(tmp_path / "c.jsonl")
    scales = measure_scales(model, tok, [1, 2], "model.layers.{}", "model.layers.{}.mlp.down_proj", str(corpus))
    texts = CORPUS[:50]
    moments = collect_second_moments(model, tok, texts, ["model.layers.1.mlp.down_proj"], max_length=128,
                                     progress=False)
    c0 = moments["model.layers.1.mlp.down_proj"]
    assert scales.c0_medians[0] == pytest.approx(float(torch.linalg.eigvalsh(c0.moment()).median()), rel=1e-6)
    rms, norms, medians = [], [], []
    for text in texts:
        ids = tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad(), capture_outputs(model, ["model.layers.2"]) as out:
            model(input_ids=ids)
        h = out["model.layers.2"][0, 1:].double()  # the first position left out
        rms += h.pow(2).mean(1).sqrt().tolist()
        norms += h.norm(dim=1).tolist()
        medians += [sorted(row.abs().tolist())[(len(row) - 1) // 2] for row in h]  # the lower median
    assert scales.residual_rms == pytest.approx(sum(rms) / len(rms), rel=1e-5)
    assert scales.residual_norm == pytest.approx(sum(norms) / len(norms), rel=1e-5)
    assert scales.residual_median_abs == pytest.approx(sum(medians) / len(medians), rel=1e-5)
    assert scales.post_mlp_norms is None and scales.key_dim == model.config.intermediate_size


def test_a_post_feedforward_norm_caps_the_clamp(tok, tmp_path):
    """Gemma-3's MLP output passes an RMSNorm: measured, each layer's |f(v)| (the norm's output size)."""
    model = tiny_config_model("gemma3", tok).eval()
    corpus = write_corpus(tmp_path / "c.jsonl")
    scales = measure_scales(model, tok, [1, 2], "model.layers.{}", "model.layers.{}.mlp.down_proj", str(corpus))
    assert scales.post_mlp_norms is not None and len(scales.post_mlp_norms) == 2
    assert all(0 < n < float("inf") for n in scales.post_mlp_norms)
    settings = rule_settings(scales)
    assert settings["clamp_norm_factor"] == min(
        0.75, float(f"{sum(scales.post_mlp_norms) / scales.residual_norm:.2g}"))


def test_many_measures_the_rules_at_the_layers_it_edits(tok, tmp_path):
    """--many widens the edited layers downward; --measure reads the C0 statistics, the residual and the post-MLP
    norms at those layers (what the written YAML edits), not at the given ones."""
    folder = tmp_path / "tiny10"
    tiny_llama(tok, seed=0, layers=10).save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "many.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "5",
                     "--measure", "--many", "--out", str(out)]) == 0
    written = yaml.safe_load(out.read_text())
    assert written["layers"] == [4, 5]  # round(7 x 10 / 30) = 2 layers ending at 5
    model = tiny_llama(tok, seed=0, layers=10).eval()
    edited = rule_settings(measure_scales(model, tok, [4, 5], "model.layers.{}", "model.layers.{}.mlp.down_proj"),
                           suppress_targets=True)
    given = rule_settings(measure_scales(model, tok, [5], "model.layers.{}", "model.layers.{}.mlp.down_proj"),
                          suppress_targets=True)
    assert edited["nullspace_threshold"] != given["nullspace_threshold"]  # the check below can tell them apart
    assert written["nullspace_threshold"] == edited["nullspace_threshold"]
    assert written["norm_weight"] == float(f"{edited['norm_weight'] * 3 / 10:.6g}")  # the rule's, then x 3/10
    assert {k: written[k] for k in ("v_lr", "clamp_norm_factor", "mom2_n_samples")} == {
        k: edited[k] for k in ("v_lr", "clamp_norm_factor", "mom2_n_samples")}


@pytest.mark.slow
@pytest.mark.parametrize("flags, shipped_name, pinned", [
    # --many: v_lr 0.885 (the median-coordinate rule; the RMS rule gave 8.29) and the post-norm --many rule's contexts
    # 2 of 5, threshold x10, text weight 200, retain-aware key and one repair round (RESULTS 12.24, 12.29-12.32)
    (["--many"], "gemma-3-270m-many.yaml", {"v_lr": 0.885, "nullspace_threshold": 0.151,
                                            "nullspace_text_weight": 200.0}),
    # --retain: the rules YAML's keys with the retain key, v_lr 0.885, 75 target steps, one repair round (12.34)
    (["--retain"], "gemma-3-270m-retain.yaml", {"v_lr": 0.885, "v_num_grad_steps": 75, "repair_rounds": 1}),
    # the plain YAML at the layers its trace chose: the text weight by key reach (12.14-12.17) and the target
    # settings behind a post-MLP norm (v_lr 0.885 by the median coordinate, 75 steps, one repair round; 12.35)
    ([], "gemma-3-270m-rules.yaml", {"v_lr": 0.885, "v_num_grad_steps": 75, "repair_rounds": 1,
                                     "nullspace_text_weight": {"key_reach": 0.6}}),
], ids=["many", "retain", "plain"])
def test_real_gemma_yaml_by_rule_is_the_shipped_file(gemma3_path, tmp_path, flags, shipped_name, pinned):
    """``init-hparams --measure`` (with ``flags``) on the real Gemma-3-270m at layers 3-5 writes the shipped
    ``shipped_name`` key for key (the model's name and device aside), with the ``pinned`` values."""
    out = tmp_path / "written.yaml"
    assert cli_main(["init-hparams", "--model", str(gemma3_path), "--method", "ZeroUnlearn-GD", "--layers", "3,4,5",
                     "--measure", *flags, "--out", str(out)]) == 0
    written = yaml.safe_load(out.read_text())
    shipped = yaml.safe_load((repo_root() / "hparams" / "ZeroUnlearn-GD" / shipped_name).read_text())
    assert {k: written[k] for k in pinned} == pinned
    machine = {"model_name", "device"}  # device: 0 where CUDA is, as the base YAML says
    assert {k: v for k, v in written.items() if k not in machine} == {
        k: v for k, v in shipped.items() if k not in machine}
