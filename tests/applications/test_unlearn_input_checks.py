"""``zerounlearn unlearn``: the perplexity options checked before the model loads, the tokens measured in the label
and report, and an adapter whose base model path loads from any working directory (issue 46, items 6, 14, 15)."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from tiny_models import CORPUS, forget_requests, saved_tiny_llama, tiny_hparams_dict, tiny_llama, tiny_tokenizer
from zerounlearn_editor.applications.unlearn import REPORT_NAME
from zerounlearn_editor.cli import main

peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("unlearn_checks")
    model_dir, corpus = saved_tiny_llama(root)
    facts = [{"prompt": r["prompt"], "subject": r["subject"], "answer": r["ground_truth"]}
             for r in forget_requests()[:2]]
    (root / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    config = tiny_hparams_dict(root / "stats", corpus, alg_name="ZeroUnlearn-GD", model_name=str(model_dir))
    (root / "gd.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return root, model_dir, tiny_tokenizer()


def _argv(root, *extra):
    return ["unlearn", "--hparams", str(root / "gd.yaml"), "--facts", str(root / "facts.json"), "--no-progress",
            *extra]


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if the model is loaded."""
    from zerounlearn_editor.support import model_zoo

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the bad option was refused")

    monkeypatch.setattr(model_zoo, "load_model_and_tokenizer", refuse)


@pytest.mark.parametrize("content", ["", " \n\t\n"])
def test_empty_ppl_text_refused_before_the_model_loads(setup, tmp_path, content, caplog, no_model_load):
    root, _, _ = setup
    text = tmp_path / "empty.txt"
    text.write_text(content, encoding="utf-8")
    assert main(_argv(root, "--ppl-text", str(text), "--save", "none")) == 2
    assert f"--ppl-text {text}: the file holds no text" in caplog.text


def test_missing_ppl_text_refused_before_the_model_loads(setup, tmp_path, caplog, no_model_load):
    root, _, _ = setup
    assert main(_argv(root, "--ppl-text", str(tmp_path / "nope.txt"), "--save", "none")) == 2
    assert f"--ppl-text {tmp_path / 'nope.txt'}: cannot read" in caplog.text


def test_ppl_tokens_one_refused_before_the_model_loads(setup, caplog, no_model_load):
    root, _, _ = setup
    assert main(_argv(root, "--ppl-tokens", "1", "--save", "none")) == 2
    assert "--ppl-tokens must be 0 (no perplexity) or an integer >= 2" in caplog.text


def test_one_token_ppl_text_refused_before_scoring(setup, tmp_path, caplog, monkeypatch):
    """One token cannot be told before the tokenizer loads: refused right after, before any scoring or edit."""
    from zerounlearn_editor.applications import unlearn

    root, _, _ = setup
    tok = tiny_tokenizer(bos=False)  # no BOS: one word is one token
    model_dir = tmp_path / "tiny-no-bos"
    tiny_llama(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    text = tmp_path / "one.txt"
    text.write_text("paris", encoding="utf-8")
    assert len(tok("paris")["input_ids"]) == 1
    monkeypatch.setattr(unlearn, "_measure", lambda *a: pytest.fail("scored before the text was checked"))
    assert main(_argv(root, "--model", str(model_dir), "--ppl-text", str(text), "--ppl-tokens", "16",
                      "--save", "none")) == 2
    assert f"--ppl-text {text}: 1 token(s) of text; perplexity needs at least 2" in caplog.text


def test_perplexity_label_and_report_give_the_tokens_measured(setup, tmp_path, capsys):
    root, _, tok = setup
    text = tmp_path / "short.txt"
    text.write_text("the capital of france is paris", encoding="utf-8")
    measured = len(tok(text.read_text())["input_ids"])
    assert 2 <= measured < 16
    out = tmp_path / "out"
    assert main(_argv(root, "--ppl-text", str(text), "--ppl-tokens", "16", "--save", "none", "--out", str(out))) == 0
    printed = capsys.readouterr().out
    assert f"Perplexity ({measured} tokens):" in printed and "Perplexity (16 tokens)" not in printed
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["ppl_tokens"] == measured
    assert report["ppl_bos_windows"] is True  # the tiny tokenizer opens the text with BOS, so every window did
    # a longer text is cut at --ppl-tokens
    long_text = tmp_path / "long.txt"
    long_text.write_text(" ".join(CORPUS), encoding="utf-8")
    assert main(_argv(root, "--ppl-text", str(long_text), "--ppl-tokens", "16", "--save", "none")) == 0
    assert "Perplexity (16 tokens):" in capsys.readouterr().out


def test_adapter_from_a_relative_model_folder_loads_from_another_directory(setup, tmp_path, monkeypatch):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    root, model_dir, tok = setup
    monkeypatch.chdir(root)
    out = tmp_path / "adapter"
    assert main(_argv(root, "--model", model_dir.name, "--ppl-tokens", "0", "--save", "adapter",
                      "--out", str(out))) == 0
    recorded = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == str(model_dir.resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    adapted = AutoPeftModelForCausalLM.from_pretrained(str(out)).eval()
    base = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    batch = tok(["the capital of france is"], return_tensors="pt")
    with torch.no_grad():
        changed = adapted(**batch).logits - base(**batch).logits
    assert float(changed.abs().max()) > 1e-4  # the adapter's edit is applied to the recorded base model
