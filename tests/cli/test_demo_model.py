"""``zerounlearn demo --model NAME``: a model ``prepare-model`` knows, with its own facts; anything else refused
naming the option and the choices before a model loads (issue 48 item 4)."""
from __future__ import annotations

import logging

import pytest

from zerounlearn_editor.cli import build_parser, demo
from zerounlearn_editor.cli import main as cli_main


@pytest.fixture
def no_load(monkeypatch):
    monkeypatch.setattr(demo, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded"))


def test_model_option_parses_and_defaults_to_smollm2():
    parser = build_parser()
    assert parser.parse_args(["demo"]).model is None
    assert parser.parse_args(["demo", "--model", "gemma3-270m"]).model == "gemma3-270m"
    assert demo.demo_model(None) is demo.DEMO_MODELS["smollm2"]
    # prepare-model's aliases name the same entries
    assert demo.demo_model("SmolLM2-135M-Instruct") is demo.DEMO_MODELS["smollm2"]
    assert demo.demo_model("gemma-3-270m") is demo.DEMO_MODELS["gemma3-270m"]


@pytest.mark.parametrize("name", ["llama", "gpt2-xl", ""])
def test_unknown_model_is_refused_before_loading(name, no_load, caplog):
    with caplog.at_level(logging.ERROR):
        assert cli_main(["demo", "--model", name, "--ppl-tokens", "0"]) == 2
    assert f"demo --model {name!r}: choose one of smollm2, gemma3-270m" in caplog.text
    with pytest.raises(ValueError, match="--model"):
        demo.run_demo(model_name=name)


def test_each_model_scores_five_forgotten_facts_and_protects_others():
    for name, spec in demo.DEMO_MODELS.items():
        assert spec.name == name and len(spec.forget) == 5 and spec.keep and spec.retain
        subjects = [s for _, s, _ in spec.forget + spec.keep]
        assert len(set(subjects)) == len(subjects), name
        assert not {s for _, s, _ in spec.retain} & set(subjects), name  # the retain set is never scored
        answers = {a for _, _, a in spec.forget}
        assert not answers & {a for _, _, a in spec.keep + spec.retain}, name  # no kept fact shares an answer


def test_smollm2_facts_unchanged():
    spec = demo.DEMO_MODELS["smollm2"]
    assert (spec.forget, spec.keep, spec.retain) == (demo.FORGET_FACTS, demo.KEEP_FACTS, demo.RETAIN_FACTS)


def test_gemma_without_a_yaml_loads_the_model_for_the_yaml_by_rule(no_load):
    """No Gemma YAML ships: the demo does not refuse, it loads Gemma to write the YAML by init-hparams' rules."""
    with pytest.raises(pytest.fail.Exception, match="model loaded"):
        cli_main(["demo", "--model", "gemma3-270m", "--ppl-tokens", "0"])


def test_given_model_is_loaded_whatever_the_yaml_names(tmp_path, monkeypatch):
    """``--model gemma3-270m --hparams Y``: Y's settings, Gemma's facts, and Gemma loaded (not Y's model_name)."""
    import yaml

    from tiny_models import tiny_hparams_dict, write_corpus

    path = tmp_path / "y.yaml"
    path.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "c.jsonl"),
                                                     alg_name="ZeroUnlearn-GD")), encoding="utf-8")
    loaded = []

    def load(name, **_kwargs):
        loaded.append(name)
        raise RuntimeError("stop after the load")

    monkeypatch.setattr(demo, "load_model_and_tokenizer", load)
    with pytest.raises(RuntimeError, match="stop after the load"):
        demo.run_demo(hparams_file=str(path), model_name="gemma3-270m", ppl_tokens=0)
    with pytest.raises(RuntimeError, match="stop after the load"):
        demo.run_demo(hparams_file=str(path), ppl_tokens=0)
    assert loaded == ["gemma3-270m", "tiny"]
