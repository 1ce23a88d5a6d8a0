"""Causal tracing (``zerounlearn trace``) and ``zerounlearn init-hparams`` on tiny Llama / GPT-2 / Qwen3."""
from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from torch import nn

from tiny_models import (
    TINY_BUILDERS,
    forget_requests,
    tiny_gpt2,
    tiny_llama,
    tiny_qwen3,
    tiny_tokenizer,
    write_corpus,
    write_tiny_counterfact,
)
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.cli.init_hparams import nearest_shipped_yaml, parse_layers
from zerounlearn_editor.engine.architectures import UnsupportedArchitecture, detect_templates
from zerounlearn_editor.harness.causal_trace import TraceFact, TraceSettings, encode_fact, suggest_window, trace_facts
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams

BUILDERS = TINY_BUILDERS
FACTS = [
    TraceFact("the capital of france is", "france", "paris"),
    TraceFact("the capital city of germany is", "capital city of germany", "berlin"),
    TraceFact("many people live in japan", "japan", "tokyo"),  # subject is the last token
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_subject_token_range(tok):
    enc = encode_fact(tok, FACTS[1])
    ids = tok(FACTS[1].prompt)["input_ids"]
    assert tok.convert_ids_to_tokens(ids[enc.subject[0]:enc.subject[1]]) == ["capital", "city", "of", "germany"]
    assert enc.answer_id == tok.convert_tokens_to_ids("berlin")
    with pytest.raises(ValueError, match="does not occur"):
        encode_fact(tok, TraceFact("the capital of france is", "spain", "madrid"))


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_trace_shapes_determinism_and_exact_restoration(tok, arch):
    model = BUILDERS[arch](tok, seed=1, layers=5)
    settings = TraceSettings(samples=3, window=2, seed=7, width=2)
    result = trace_facts(model, tok, FACTS, settings, progress=False)
    for kind in ("residual", "mlp", "attention"):
        assert len(result[kind]) == 5 and all(math.isfinite(v) and 0 <= v <= 1 for v in result[kind])
        assert len(result["indirect_effect"][kind]) == 5
    assert len(result["cases"]) == 3 and len(result["suggested_layers"]) == 2
    lo = result["suggested_layers"][0]
    assert result["suggested_layers"] == [lo, lo + 1]
    # the subject is the prompt's last token: restoring the last layer's residual state there
    # restores the output distribution exactly, whatever the noise
    last = result["cases"][2]
    assert last["residual"][-1] == pytest.approx(last["p_clean"], rel=1e-5)
    assert last["p_corrupt"] != pytest.approx(last["p_clean"], rel=1e-6)
    # seeded: the same numbers again; another seed changes them; chunking does not
    again = trace_facts(model, tok, FACTS, settings, progress=False)
    assert again["residual"] == result["residual"] and again["mlp"] == result["mlp"]
    chunked = trace_facts(
        model, tok, FACTS, TraceSettings(samples=3, window=2, seed=7, width=2, max_rows=4), progress=False
    )
    assert chunked["attention"] == pytest.approx(result["attention"], abs=1e-6)
    other = trace_facts(model, tok, FACTS, TraceSettings(samples=3, window=2, seed=8, width=2), progress=False)
    assert other["p_corrupt"] != result["p_corrupt"]


def test_vanishing_noise_leaves_the_clean_probability(tok, caplog):
    model = tiny_llama(tok, seed=2, layers=4)
    with caplog.at_level("WARNING", logger="zerounlearn_editor.harness.causal_trace"):
        result = trace_facts(model, tok, FACTS, TraceSettings(noise=1e-7, samples=2, window=2, width=1),
                             progress=False)
    assert result["p_corrupt"] == pytest.approx(result["p_clean"], rel=1e-4)
    assert result["mlp"] == pytest.approx([result["p_clean"]] * 4, rel=1e-4)
    assert "the noise hardly removes the facts" in caplog.text  # the suggested layers rest on nothing
    from arch_zoo import FACTS as KNOWN
    from arch_zoo import trained_model

    trained, trained_tok = trained_model("llama")  # knows its facts: ROME's noise removes them
    caplog.clear()
    with caplog.at_level("WARNING", logger="zerounlearn_editor.harness.causal_trace"):
        strong = trace_facts(trained, trained_tok, [TraceFact(*fact) for fact in KNOWN],
                             TraceSettings(samples=4, window=2, width=1), progress=False)
    assert strong["p_corrupt"] <= 0.5 * strong["p_clean"] and "hardly removes" not in caplog.text


def test_suggest_window():
    assert suggest_window([0, 1, 5, 4, 0], 2) == [2, 3]
    assert suggest_window([1, 1, 1], 2) == [0, 1]
    with pytest.raises(ValueError):
        suggest_window([1, 2], 3)


def test_unsupported_architecture_is_a_clear_error():
    class Odd(nn.Module):
        class config:  # noqa: N801 - mimics a HF config
            model_type = "mamba"

    with pytest.raises(UnsupportedArchitecture, match="mamba.*cannot tell the number of layers"):
        detect_templates(Odd())


def test_parse_layers():
    assert parse_layers("auto", 4) is None
    assert parse_layers("3,1", 4) == [1, 3] and parse_layers("1-3", 4) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"not in 0\.\.3"):
        parse_layers("2,4", 4)


def test_nearest_shipped_yaml(tok):
    assert nearest_shipped_yaml("ZeroUnlearn", detect_templates(tiny_gpt2(tok))).name == "gpt2-xl.yaml"
    assert nearest_shipped_yaml("ZeroUnlearn-GD", detect_templates(tiny_qwen3(tok))).name == "Qwen3-4B.yaml"
    assert nearest_shipped_yaml("ZeroUnlearn", detect_templates(tiny_llama(tok))).stem.startswith("Llama-3.2-3B")


@pytest.mark.parametrize(
    "arch,method", [("llama", "ZeroUnlearn"), ("gpt2", "ZeroUnlearn-GD"), ("qwen3", "ZeroUnlearn")]
)
def test_init_hparams_writes_a_yaml_that_edits(tok, tmp_path, arch, method, capsys):
    model = BUILDERS[arch](tok, seed=0, layers=4)
    folder = tmp_path / f"tiny-{arch}"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "hp.yaml"
    code = cli_main(["init-hparams", "--model", str(folder), "--method", method, "--layers", "1,2", "--out", str(out),
                     "--set", f"mom2_dataset={corpus}", "--set", f"stats_dir={tmp_path / 'stats'}",
                     "--set", "mom2_n_samples=30", "--set", "v_num_grad_steps=5", "--set", "mom2_dtype=float64"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "layers: [1, 2]"
    config = yaml.safe_load(out.read_text())
    templates = detect_templates(model)
    assert config["rewrite_module_tmp"] == templates["rewrite_module_tmp"] and config["v_loss_layer"] == 3
    cls = ZeroUnlearnHyperParams if method == "ZeroUnlearn" else ZeroUnlearnGDHyperParams
    hp = cls.from_hparams(out)  # strict loader
    assert hp.layers == [1, 2] and hp.model_name == str(folder)
    from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model
    from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    loaded, loaded_tok = load_model_and_tokenizer(hp.model_name)
    apply = apply_zerounlearn_to_model if method == "ZeroUnlearn" else apply_zerounlearn_gd_to_model
    before = {k: v.clone() for k, v in loaded.state_dict().items()}
    _, weights = apply(loaded, loaded_tok, forget_requests(), hp, return_orig_weights=True, progress=False)
    changed = [k for k, v in loaded.state_dict().items() if not torch.equal(v, before[k])]
    assert changed and all(any(t in k for t in ("layers.1.", "layers.2.", "h.1.", "h.2.")) for k in changed)
    assert all(torch.isfinite(v).all() for v in loaded.state_dict().values())


def test_init_hparams_auto_layers_from_a_trace(tok, tmp_path, capsys):
    model = tiny_llama(tok, seed=0, layers=6)
    folder = tmp_path / "tiny"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    data = write_tiny_counterfact(tmp_path / "cf.json")
    trace_dir = tmp_path / "trace"
    assert cli_main(["trace", "--model", str(folder), "--data", str(data), "--n", "3", "--include-unknown",
                     "--samples", "2", "--window", "2", "--width", "2", "--out", str(trace_dir), "--no-progress"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    stored = json.loads((trace_dir / "trace.json").read_text())
    assert last == f"layers: {json.dumps(stored['suggested_layers'])}"
    assert stored["settings"]["samples"] == 2 and len(stored["cases"]) == 3 and len(stored["mlp"]) == 6
    out = tmp_path / "auto.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn", "--layers", "auto",
                     "--trace", str(trace_dir / "trace.json"), "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["layers"] == stored["suggested_layers"]
    # a random tiny model knows none of the facts: a clear error rather than an empty trace
    assert (
        cli_main(["trace", "--model", str(folder), "--data", str(data), "--n", "3", "--out", str(tmp_path / "t2")]) == 2
    )


def test_init_hparams_deep_applies_the_deep_mode_keys(tok, tmp_path, caplog):
    """``--deep``: deep_mode_settings() over the nearest paper YAML, ``--set`` still last; GD only."""
    from zerounlearn_editor.methods.zerounlearn_gd.config import deep_mode_settings

    folder = tmp_path / "tiny"
    tiny_qwen3(tok, seed=0, layers=4).save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "deep.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "1,2",
                     "--deep", "--set", "v_num_grad_steps=7", "--out", str(out)]) == 0
    config = yaml.safe_load(out.read_text())
    deep = deep_mode_settings()
    assert {k: config[k] for k in deep} == {**deep, "v_num_grad_steps": 7}
    assert "deep-forgetting keys" in out.read_text().splitlines()[0]
    plain = tmp_path / "plain.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "1,2",
                     "--out", str(plain)]) == 0
    assert yaml.safe_load(plain.read_text())["clamp_norm_factor"] != deep["clamp_norm_factor"]
    refused = tmp_path / "refused.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn", "--layers", "1,2",
                     "--deep", "--out", str(refused)]) == 2
    assert "--deep is a ZeroUnlearn-GD mode" in caplog.text and not refused.exists()


def _refuse_loading(monkeypatch):
    from zerounlearn_editor.support import model_zoo

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the bad input was found")

    monkeypatch.setattr(model_zoo, "load_model_and_tokenizer", refuse)


def test_init_hparams_out_folder_and_bad_facts_fail_before_loading(tok, tmp_path, monkeypatch, caplog):
    """Issue 36.10: ``--out FOLDER`` raised IsADirectoryError after the model loaded (and ``--facts`` is read
    before loading too)."""
    folder = tmp_path / "tiny"
    tiny_llama(tok, seed=0, layers=4).save_pretrained(folder)
    tok.save_pretrained(folder)
    taken = tmp_path / "a-folder"
    taken.mkdir()
    with monkeypatch.context() as patch:
        _refuse_loading(patch)
        assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn", "--layers", "1,2",
                         "--out", str(taken)]) == 2
        assert f"--out {taken} is a folder; init-hparams writes one YAML file" in caplog.text
        assert list(taken.iterdir()) == []
        caplog.clear()
        bad_facts = tmp_path / "bad.json"
        bad_facts.write_text(json.dumps([{"prompt": "the capital of japan", "subject": "spain", "answer": "tokyo"}]))
        assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn", "--facts", str(bad_facts),
                         "--out", str(tmp_path / "x.yaml")]) == 2
        assert f"{bad_facts}: record 0: field 'subject'" in caplog.text


def test_init_hparams_last_layer_blames_the_layers_option(tok, tmp_path, caplog):
    """Issue 36.16: ``--layers 3`` on a 4-layer model blamed ``v_loss_layer``, a key the user never wrote."""
    folder = tmp_path / "tiny"
    tiny_llama(tok, seed=0, layers=4).save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "last.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "3",
                     "--out", str(out)]) == 2
    assert "--layers 3: layer 3 is the model's last layer (it has 4 layers, 0..3)" in caplog.text
    assert "choose layers in 0..2" in caplog.text and "v_loss_layer" not in caplog.text and not out.exists()


def test_init_hparams_auto_traces_the_facts_the_model_answers(tmp_path, capsys, caplog):
    """Issue 36.17: ``--layers auto`` traced CounterFact facts whatever the model knew; now the user's ``--facts``
    (those the model answers), with the count in the output and the YAML, and too few answered ones refused."""
    from arch_zoo import FACTS, trained_model

    model, tok = trained_model("llama")
    folder = tmp_path / "trained"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    unknown = [("the capital of egypt", "egypt", "berlin"), ("the sport of japan", "japan", "piano")]
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps([{"prompt": p, "subject": s, "answer": a} for p, s, a in FACTS + unknown]))
    out = tmp_path / "auto.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "auto",
                     "--facts", str(facts), "--width", "2", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    note = (
        f"causal trace of 5 facts the model answers (first answer token its argmax) of --facts {facts} (7 in the file)"
    )
    assert note in printed and note in out.read_text().splitlines()[0]
    layers = yaml.safe_load(out.read_text())["layers"]
    assert len(layers) == 2 and max(layers) < 3
    few = tmp_path / "few.json"
    few.write_text(json.dumps([{"prompt": p, "subject": s, "answer": a} for p, s, a in FACTS[:2] + unknown]))
    refused = tmp_path / "refused.yaml"
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "auto",
                     "--facts", str(few), "--out", str(refused), "--no-progress"]) == 2
    assert f"only 2 of the 4 facts of --facts {few} are answered by the model, fewer than the 3" in caplog.text
    assert not refused.exists()
    caplog.clear()
    assert cli_main(["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", "auto",
                     "--facts", str(facts), "--trace-n", "7", "--width", "2", "--out", str(out), "--no-progress"]) == 0
    assert "tracing 5 facts the model answers" in caplog.text and "rest on few facts" in caplog.text


@pytest.mark.parametrize("arch", ["gemma3", "llama"])
def test_trace_noise_is_scaled_to_the_embeddings_the_model_reads(tok, arch):
    """The corruption is ``noise`` (3) times the std of the subject embeddings as the first layer reads them, also
    for Gemma, whose embedding module multiplies its rows by sqrt(d_model) (it was 3 / sqrt(d_model) there)."""
    from arch_zoo import tiny_config_model

    model = tiny_config_model(arch, tok, layers=2, seed=3)
    fact = FACTS[1]  # a four-token subject
    s0, s1 = encode_fact(tok, fact).subject
    seen = []
    handle = model.model.layers[0].register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append((args[0] if args else kwargs["hidden_states"]).detach().clone()),
        with_kwargs=True)
    try:
        result = trace_facts(model, tok, [fact], TraceSettings(samples=50, window=1, width=1), progress=False)
    finally:
        handle.remove()
    first_noisy = next(i for i, h in enumerate(seen) if h.shape[0] > 1)
    clean, noisy = seen[first_noisy - 1], seen[first_noisy]  # the clean run, then the corrupted rows
    with torch.no_grad():
        embedded = model.get_input_embeddings()(torch.tensor([encode_fact(tok, fact).ids]))[0, s0:s1]
    assert result["embedding_std"] == pytest.approx(float(embedded.std()), rel=1e-5)
    noise = noisy[:, s0:s1] - clean[:, s0:s1]
    assert float(noise.std()) == pytest.approx(3.0 * float(embedded.std()), rel=0.1)
    assert torch.equal(noisy[:, :s0], clean[:, :s0].expand(noisy.shape[0], -1, -1))
