"""``zerounlearn unlearn`` end to end on a tiny Llama saved to disk (adapter, model, errors)."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from tiny_models import CORPUS, forget_requests, saved_tiny_llama, tiny_hparams_dict, tiny_tokenizer
from zerounlearn_editor.applications.unlearn import REPORT_NAME, load_facts
from zerounlearn_editor.cli import main

peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("unlearn")
    model_dir, corpus = saved_tiny_llama(root)
    (root / "ppl.txt").write_text(" ".join(CORPUS), encoding="utf-8")
    facts = [{"prompt": r["prompt"], "subject": r["subject"], "answer": r["ground_truth"]} for r in forget_requests()]
    facts[2].pop("answer")  # answers are optional
    (root / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    hparams = {}
    for alg in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        config = tiny_hparams_dict(root / "stats", corpus, alg_name=alg, model_name=str(model_dir))
        hparams[alg] = root / f"{alg}.yaml"
        hparams[alg].write_text(yaml.safe_dump(config), encoding="utf-8")
    return root, model_dir, hparams, tiny_tokenizer()


def _run(setup, *extra):
    root, _, _, _ = setup
    return main(["unlearn", "--facts", str(root / "facts.json"), "--ppl-text", str(root / "ppl.txt"),
                 "--ppl-tokens", "60", "--no-progress", *extra])


def _logits(model, tok):
    batch = tok(["the capital of france is paris", "many people live in london"], return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("alg", ["ZeroUnlearn", "ZeroUnlearn-GD"])
def test_unlearn_adapter_and_model_agree(setup, alg, capsys):
    from transformers import AutoModelForCausalLM

    from zerounlearn_editor.integrations.adapters import load_lora_adapter

    root, model_dir, hparams, tok = setup
    out_a, out_m = root / f"{alg}-adapter", root / f"{alg}-model"
    assert _run(setup, "--hparams", str(hparams[alg]), "--out", str(out_a), "--save", "adapter") == 0
    table = capsys.readouterr().out
    assert "| the capital of france is | paris |" in table and "| the capital of japan is | - | - |" in table
    assert "Perplexity (60 tokens):" in table and "LoRA adapter (r=" in table
    assert _run(setup, "--hparams", str(hparams[alg]), "--out", str(out_m), "--save", "model") == 0

    report = json.loads((out_a / REPORT_NAME).read_text())
    assert report["method"] == alg and len(report["forgotten"]) == 3
    assert report["forgotten"][2]["acc_before"] is None and report["forgotten"][0]["acc_before"] is not None
    assert report["saved"]["r"] <= (2 if alg == "ZeroUnlearn" else 1) * 3
    assert (out_m / "model.safetensors").is_file() and (out_m / "tokenizer.json").is_file()

    base = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    logits_base = _logits(base, tok)
    edited = AutoModelForCausalLM.from_pretrained(out_m).eval()
    logits_edit = _logits(edited, tok)
    assert float((logits_edit - logits_base).norm() / logits_base.norm()) > 1e-3
    adapted = load_lora_adapter(base, out_a).eval()  # the adapter's recorded base model is this one
    assert float((_logits(adapted, tok) - logits_edit).norm() / logits_edit.norm()) < 1e-4


def test_retain_needs_retain_weights(setup, tmp_path, caplog):
    root, _, hparams, _ = setup
    retain = tmp_path / "keep.yaml"
    retain.write_text("- {prompt: the capital of italy is, subject: italy, answer: rome}\n", encoding="utf-8")
    assert _run(setup, "--hparams", str(hparams["ZeroUnlearn"]), "--retain", str(retain), "--save", "none") == 2
    assert "retain weights" in caplog.text


def test_retain_aware_run_scores_retain_facts(setup, tmp_path, capsys):
    root, model_dir, _, _ = setup
    config = tiny_hparams_dict(root / "stats", root / "corpus.jsonl", alg_name="ZeroUnlearn-GD",
                               model_name=str(model_dir), retain_nullspace_weight=1.0)
    path = tmp_path / "gd-retain.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    retain = tmp_path / "keep.yaml"
    retain.write_text("- {prompt: the capital of italy is, subject: italy, answer: rome}\n", encoding="utf-8")
    assert _run(setup, "--hparams", str(path), "--retain", str(retain), "--out", str(tmp_path / "o")) == 0
    out = capsys.readouterr().out
    assert "### Retain facts" in out and "| the capital of italy is | rome |" in out


@pytest.mark.parametrize(
    "content, message",
    [
        ('[{"prompt": "the capital of france is"}]', r"facts.json: record 0: field 'subject': missing"),
        (
            '[{"prompt": "the capital of france is", "subject": "spain"}]',
            r"record 0: field 'subject' 'spain' does not occur",
        ),
        ('[{"prompt": "a b", "subject": "a", "answr": "x"}]', r"record 0: unknown field\(s\) \['answr'\]"),
        ('[{"prompt": "a b", "subject": "a", "answer": ""}]', r"record 0: field 'answer' must be a non-empty string"),
        ("{}", r"expected a list of facts to forget"),
    ],
)
def test_bad_facts_files_are_named(tmp_path, content, message):
    path = tmp_path / "facts.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_facts(path)


def test_bad_save_mode_and_missing_out(setup):
    root, _, hparams, _ = setup
    with pytest.raises(SystemExit):
        _run(setup, "--hparams", str(hparams["ZeroUnlearn"]), "--save", "weights")
    assert _run(setup, "--hparams", str(hparams["ZeroUnlearn"]), "--save", "adapter") == 2


def test_adapter_with_the_quantized_keys_has_room_for_both_columns_of_each_fact(setup, tmp_path):
    """``quantized_forget_keys`` gives ZeroUnlearn-GD's solve two columns a fact (the key and its rounded
    twin's), so a layer's change can reach rank 2n: ``--save adapter`` exports with that bound and reproduces the
    edit (with the bound n it refused the change as not low-rank)."""
    from transformers import AutoModelForCausalLM

    from zerounlearn_editor.integrations.adapters import load_lora_adapter

    root, model_dir, hparams, tok = setup
    config = yaml.safe_load(hparams["ZeroUnlearn-GD"].read_text())
    config["quantized_forget_keys"] = {"scheme": "int4", "weight": 1.0}
    config["orthogonality_weight"] = 1e4  # the term through which the twin columns add directions of their own
    yaml_file = tmp_path / "qkeys.yaml"
    yaml_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    out_a, out_m = tmp_path / "adapter", tmp_path / "model"
    assert _run(setup, "--hparams", str(yaml_file), "--out", str(out_a), "--save", "adapter") == 0
    assert _run(setup, "--hparams", str(yaml_file), "--out", str(out_m), "--save", "model") == 0
    report = json.loads((out_a / REPORT_NAME).read_text())
    assert report["saved"]["r"] > 3  # more than one direction a fact was needed
    edited = AutoModelForCausalLM.from_pretrained(out_m).eval()
    logits_edit = _logits(edited, tok)
    adapted = load_lora_adapter(AutoModelForCausalLM.from_pretrained(model_dir).eval(), out_a).eval()
    assert float((_logits(adapted, tok) - logits_edit).norm() / logits_edit.norm()) < 1e-4
