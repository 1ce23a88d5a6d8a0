"""The YAML by ``init-hparams``' rules written in-process and cached (``zerounlearn demo --model gemma3-270m``
without ``--hparams``): the same keys as ``init-hparams --layers auto --facts``, read back on a second call, a new
file when the weights or the facts change; the demo names the YAML it used."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from tiny_models import tiny_llama, tiny_tokenizer
from zerounlearn_editor.cli import demo, rules_yaml
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.cli.demo import format_demo
from zerounlearn_editor.harness import causal_trace

FACTS = [("the capital of france is", "france", "paris"), ("the capital of germany is", "germany", "berlin"),
         ("the capital of japan is", "japan", "tokyo")]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture
def all_answered(monkeypatch):
    """A random tiny model answers none of the facts; the trace takes them all (as for a model that knows them)."""
    monkeypatch.setattr(causal_trace, "answered_facts", lambda model, tok, facts, n=None: list(facts)[:n])


def _model(tok, seed=0):
    return tiny_llama(tok, seed=seed, layers=6).eval()


def test_the_yaml_by_rule_is_init_hparams_auto_and_is_cached(tok, tmp_path, all_answered, monkeypatch):
    model = _model(tok)
    folder = tmp_path / "tiny6"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    path = rules_yaml.rules_yaml(model, tok, str(folder), FACTS, cache_dir=tmp_path / "cache")
    facts_file = tmp_path / "facts.json"
    facts_file.write_text(json.dumps([dict(prompt=p, subject=s, answer=a) for p, s, a in FACTS]))
    out = tmp_path / "cli.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "auto",
                     "--facts", str(facts_file), "--out", str(out), "--no-progress"]) == 0
    assert yaml.safe_load(path.read_text()) == yaml.safe_load(out.read_text())
    header = path.read_text().splitlines()
    assert any(line.startswith("# Settings by rule") for line in header)
    assert not any("Context prefixes" in line for line in header)  # the contexts are the base YAML's (12.5)
    assert path.parent == tmp_path / "cache" and path.name.startswith("tiny6-ZeroUnlearn-GD-")
    # a second call reads the file: no trace, no measurement
    monkeypatch.setattr(rules_yaml, "trace_layers", lambda *a, **k: pytest.fail("traced again"))
    monkeypatch.setattr(rules_yaml, "scale_rules_for", lambda *a, **k: pytest.fail("measured again"))
    assert rules_yaml.rules_yaml(model, tok, str(folder), FACTS, cache_dir=tmp_path / "cache") == path


def test_the_key_follows_the_weights_the_facts_and_the_rules(tok, monkeypatch):
    model = _model(tok)
    key = rules_yaml.rules_yaml_key(model, FACTS, 1, 3)
    assert rules_yaml.rules_yaml_key(_model(tok), FACTS, 1, 3) == key  # same weights, same key
    assert rules_yaml.rules_yaml_key(_model(tok, seed=1), FACTS, 1, 3) != key
    assert rules_yaml.rules_yaml_key(model, FACTS[:2], 1, 3) != key
    assert rules_yaml.rules_yaml_key(model, FACTS, 2, 3) != key
    assert rules_yaml.rules_yaml_key(model.to(torch.bfloat16), FACTS, 1, 3) != key
    model = _model(tok)
    import zerounlearn_editor.methods.zerounlearn_gd.scale_rules as scale_rules

    monkeypatch.setattr(scale_rules, "RULES_VERSION", scale_rules.RULES_VERSION + 1)
    assert rules_yaml.rules_yaml_key(model, FACTS, 1, 3) != key
    monkeypatch.setattr(scale_rules, "RULES_VERSION", scale_rules.RULES_VERSION - 1)
    assert rules_yaml.rules_yaml_key(model, FACTS, 1, 3) == key
    monkeypatch.setattr(scale_rules, "FIRST_TRY_KEY_REACH", 0.5)  # the text weight's reach is part of the key too
    assert rules_yaml.rules_yaml_key(model, FACTS, 1, 3) != key


def test_too_few_answered_facts_are_refused_before_anything_is_written(tok, tmp_path):
    with pytest.raises(ValueError, match="only 0 of the 3 facts are answered"):
        rules_yaml.rules_yaml(_model(tok), tok, "tiny", FACTS, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_gemma_demo_without_hparams_uses_the_yaml_by_rule(tok, tmp_path, all_answered, monkeypatch):
    """``demo --model gemma3-270m`` without ``--hparams`` loads the model once, writes (then reuses) the YAML by rule
    and names it; ``--paper`` without ``--hparams`` is refused."""
    loads = []

    def load(name, **_kwargs):
        loads.append(name)
        return _model(tok), tok

    written = []
    real = rules_yaml.rules_yaml

    def cached(model, tok_, name, facts, **kw):
        written.append(real(model, tok_, name, FACTS, cache_dir=tmp_path / "cache"))
        return written[-1]

    monkeypatch.setattr(demo, "load_model_and_tokenizer", load)
    monkeypatch.setattr(rules_yaml, "rules_yaml", cached)
    with pytest.raises(ValueError, match="--paper: no paper ZeroUnlearn YAML ships"):
        demo.run_demo(model_name="gemma3-270m", paper=True, ppl_tokens=0)
    loaded, used = demo._rule_yaml_model(demo.DEMO_MODELS["gemma3-270m"], None, False, "cpu", None)
    assert loads == ["gemma3-270m"] and used == str(written[0]) and loaded[1] is tok
    assert demo._rule_yaml_model(demo.DEMO_MODELS["gemma3-270m"], "given.yaml", False, "cpu", None) == (
        None, "given.yaml")
    assert demo._rule_yaml_model(demo.DEMO_MODELS["smollm2"], None, False, "cpu", None) == (None, None)


def test_the_demo_report_names_its_yaml():
    result = demo.DemoResult([], [], 10.0, 10.5, {}, "ZeroUnlearn-GD (paper)", "float32", "/cache/hparams/rules/x.yaml")
    lines = format_demo(result).splitlines()
    assert lines[:2] == ["Method: ZeroUnlearn-GD (paper)", "YAML: /cache/hparams/rules/x.yaml"]


def test_the_demo_method_line_says_what_the_edit_adds_to_the_papers():
    """A YAML with the text weight (the Gemma YAML by rule) is not called the paper's; one with neither a retain set nor
    a text weight is."""
    from types import SimpleNamespace

    gd = SimpleNamespace(alg_name="ZeroUnlearn-GD", nullspace_text_weight=None)
    assert demo.demo_mode(gd, 0, "other facts") == "ZeroUnlearn-GD (paper)"
    assert demo.demo_mode(gd, 3, "other facts") == "ZeroUnlearn-GD + retain set of 3 other facts"
    weighted = SimpleNamespace(alg_name="ZeroUnlearn-GD", nullspace_text_weight={"key_reach": 0.6})
    assert demo.demo_mode(weighted, 0, "x") == "ZeroUnlearn-GD + text weight {'key_reach': 0.6}"
    assert demo.demo_mode(SimpleNamespace(alg_name="ZeroUnlearn"), 0, "x") == "ZeroUnlearn (paper)"


def test_the_demo_yaml_keeps_the_papers_null_space_penalty(tok, tmp_path, all_answered, monkeypatch):
    """RESULTS 12.17: with the text weight by key reach the Gemma demo left 2 of its 5 facts answered, so the demo's
    YAML by rule asks the settings by rule without it (``plain=False``), for any model."""
    asked = []

    def recording(model, tok_, layers, plain=False):
        asked.append(plain)
        return {}, ""

    monkeypatch.setattr(rules_yaml, "scale_rules_for", recording)
    model = _model(tok)
    path = rules_yaml.rules_yaml(model, tok, "tiny6", FACTS, cache_dir=tmp_path / "cache")
    assert asked == [False] and "nullspace_text_weight" not in yaml.safe_load(path.read_text())
