"""Any causal LM: module templates from the loaded structure, trace / init-hparams, and the edit itself,
on tiny models of 15 transformers architectures (random for the structure, trained on a few facts for the edit)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers as T
import yaml
from torch import nn

from arch_zoo import (
    ARCHS,
    FORGET,
    KEEP,
    TINY_EDIT_SETTINGS,
    corpus_perplexity,
    knows,
    tiny_config_model,
    trained_model,
    write_c0_corpus,
    write_facts_counterfact,
)
from tiny_models import CORPUS, tiny_tokenizer, write_corpus
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.engine.architectures import UnsupportedArchitecture, detect_templates
from zerounlearn_editor.harness.causal_trace import TraceFact, TraceSettings, trace_facts
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

REWRITE = {
    "gpt2": "transformer.h.{}.mlp.c_proj", "gpt_neox": "gpt_neox.layers.{}.mlp.dense_4h_to_h",
    "opt": "model.decoder.layers.{}.fc2", "falcon": "transformer.h.{}.mlp.dense_4h_to_h",
}
GUARD_TEXT = " ".join(dict.fromkeys(CORPUS))


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_templates_from_the_structure(tok, arch):
    model = tiny_config_model(arch, tok, layers=3)
    t = detect_templates(model)
    assert t["num_layers"] == 3 and t["family"] == model.config.model_type
    assert t["rewrite_module_tmp"] == REWRITE.get(arch, "model.layers.{}.mlp.down_proj")
    W = get_weight_matrix(get_module(model, t["rewrite_module_tmp"].format(2)))
    assert W.shape[0] == 48 and W.shape[1] in (96, 192)  # d_ff -> d_model (Falcon: 4 d_model)
    assert get_module(model, t["lm_head_module"]) is model.get_output_embeddings()
    assert get_module(model, t["embed_module"]) is model.get_input_embeddings()
    for key in ("layer_module_tmp", "mlp_module_tmp", "attn_module_tmp"):
        get_module(model, t[key].format(1))
    # the final norm reads the last block's output
    seen = {}

    def last_block(_m, _a, out) -> None:
        seen["h"] = out[0] if isinstance(out, tuple) else out

    def final_norm(_m, args) -> None:
        seen["n"] = args[0]

    h1 = get_module(model, t["layer_module_tmp"].format(2)).register_forward_hook(last_block)
    h2 = get_module(model, t["ln_f_module"]).register_forward_pre_hook(final_norm)
    try:
        model(input_ids=torch.tensor([[4, 5, 6]]))
    finally:
        h1.remove(), h2.remove()
    assert torch.equal(seen["h"], seen["n"])


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_templates_of_a_meta_device_model_from_its_structure(tok, arch):
    """Issue 36.14: a model built on the meta device (no weights) failed with ``aten::equal``; its templates are
    those of the same model with weights."""
    model = tiny_config_model(arch, tok, layers=3)
    with torch.device("meta"):
        empty = type(model)(model.config)
    assert next(empty.parameters()).is_meta
    assert detect_templates(empty) == detect_templates(model)


def test_meta_device_model_whose_final_norm_the_structure_cannot_tell(tok):
    """Issue 36.14: two norms after the blocks and no values to follow: a clear error, not a guess."""
    model = tiny_config_model("llama", tok, layers=2)
    model.model.extra_norm = type(model.model.norm)(48)  # registered after the blocks, as the final norm
    model = model.to("meta")
    with pytest.raises(UnsupportedArchitecture, match=r"weights are on the meta device, so the final norm cannot be "
                                                      r"told apart among \['model.extra_norm', 'model.norm'\]"):
        detect_templates(model)


def test_encoder_decoder_model_is_named_as_such():
    """Issue 36.14: T5 was refused with 'no attention module in the block'."""
    config = T.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=2)
    with pytest.raises(UnsupportedArchitecture, match=r"t5 \(T5ForConditionalGeneration\): encoder-decoder models are "
                                                      r"not supported"):
        detect_templates(T.T5ForConditionalGeneration(config))


def test_gemma3_is_no_longer_refused(tok):
    t = detect_templates(tiny_config_model("gemma3", tok, layers=3))
    assert t["family"] == "gemma3_text" and t["ln_f_module"] == "model.norm"


def test_mixture_of_experts_is_not_supported(tok):
    config = T.MixtralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, num_local_experts=2, num_experts_per_tok=1)
    with pytest.raises(UnsupportedArchitecture, match="mixture-of-experts MLPs are not supported"):
        detect_templates(T.MixtralForCausalLM(config))


def test_what_is_missing_is_named(tok):
    model = tiny_config_model("llama", tok, layers=2)
    model.model.norm = nn.Identity()
    with pytest.raises(UnsupportedArchitecture, match="no final norm"):
        detect_templates(model)

    class NoLayers(nn.Module):
        class config:  # noqa: N801 - mimics a HF config
            model_type = "mamba"
            num_hidden_layers = 4
            hidden_size = 8

    with pytest.raises(UnsupportedArchitecture, match="mamba.*no list of 4 decoder blocks"):
        detect_templates(NoLayers())


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_trace_and_init_hparams(tok, tmp_path, arch, capsys):
    model = tiny_config_model(arch, tok, layers=4)
    folder = tmp_path / arch
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    # the trace on the model in memory (a reloaded word-level tokenizer may take another class per model type)
    facts = [TraceFact(p, s, a) for p, s, a in FORGET]
    trace = trace_facts(model, tok, facts, TraceSettings(samples=2, window=2, width=2), progress=False)
    assert len(trace["mlp"]) == 4 and all(0 <= p <= 1 for p in trace["mlp"] + trace["attention"])
    assert trace["templates"]["mlp_module_tmp"] == detect_templates(model)["mlp_module_tmp"]
    # restoring the last layer's residual at the subject (the prompt's last token) restores the clean output
    assert trace["cases"][0]["residual"][-1] == pytest.approx(trace["cases"][0]["p_clean"], rel=1e-4)
    for method, cls in (("ZeroUnlearn", ZeroUnlearnHyperParams), ("ZeroUnlearn-GD", ZeroUnlearnGDHyperParams)):
        out = tmp_path / f"{method}.yaml"
        assert (
            cli_main(["init-hparams", "--model", str(folder), "--method", method, "--layers", "1,2", "--out", str(out)])
            == 0
        )
        hp = cls.from_hparams(out)  # strict
        assert hp.rewrite_module_tmp == REWRITE.get(arch, "model.layers.{}.mlp.down_proj") and hp.v_loss_layer == 3
        assert yaml.safe_load(out.read_text())["layers"] == [1, 2]


def _init(folder: Path, tmp_path: Path, layers: str, extra=()) -> ZeroUnlearnGDHyperParams:
    out = tmp_path / "hp.yaml"
    args = ["init-hparams", "--model", str(folder), "--method", "ZeroUnlearn-GD", "--layers", layers, "--out", str(out),
            "--trace-data", str(write_facts_counterfact(tmp_path / "facts.json")), "--trace-n", "5", "--width", "2"]
    for item in [f"mom2_dataset={write_c0_corpus(tmp_path / 'c0.jsonl')}", f"stats_dir={tmp_path / 'stats'}",
                 *TINY_EDIT_SETTINGS, *extra]:
        args += ["--set", item]
    assert cli_main(args) == 0
    return ZeroUnlearnGDHyperParams.from_hparams(out)


def _forget_and_measure(model, tok, hp):
    before = corpus_perplexity(model, tok)
    requests = [{"prompt": p, "subject": s, "ground_truth": a} for p, s, a in FORGET]
    apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False, fluency_text=GUARD_TEXT)
    return knows(model, tok, FORGET), knows(model, tok, KEEP), corpus_perplexity(model, tok) / before - 1


# measured with TINY_EDIT_SETTINGS at layers 1-2 on the trained models (d_ff TRAINED_FF, facts known at
# p >= 0.9, C0_TEXT statistics). Gemma-2/3's post-feedforward RMSNorm gives the MLP output a fixed size
# (|N(v)| ~ 7 here), so a layer moves the residual at most about that far; the EOS targets ask 12-21 at
# the last edited layer (no softcapping: the same miss). OPT's edit takes a kept fact along (the paper's collateral:
# keys that overlap).
KNOWN_MISSES = {
    "gemma2": "post-norm caps the move: forgets 1 of 2 facts (tokyo 0.98 -> 0.48, still the argmax)",
    "gemma3": "post-norm caps the move: forgets 1 of 2 facts (tokyo 0.93 -> 0.32, still the argmax)",
    "opt": "keeps 2 of 3 facts (england's football 0.98 -> 0.03)",
}


@pytest.mark.parametrize(
    "arch",
    [
        # not strict: the trained tiny models differ by CPU kernel set (seeded init and training round per
        # capability), and these misses sit at the edge: OPT's and Gemma-2/3's edits succeed on an AMD AVX2 host
        pytest.param(a, marks=pytest.mark.xfail(a in KNOWN_MISSES, reason=KNOWN_MISSES.get(a, ""), strict=False))
        for a in sorted(ARCHS)
    ],
)
def test_edit_forgets_a_trained_fact_and_keeps_the_rest(tmp_path, arch):
    model, tok = trained_model(arch)
    assert all(knows(model, tok, FORGET)) and all(knows(model, tok, KEEP))
    folder = tmp_path / arch
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    hp = _init(folder, tmp_path, "1,2")
    forgot, kept, increase = _forget_and_measure(model, tok, hp)
    assert not any(forgot), forgot
    assert all(kept), kept
    assert increase < 0.10


# The retain-aware mode (README "Surgical forgetting", opt-in) with the kept facts as its retain set and the
# shipped -retain YAMLs' retain_nullspace_weight: the null space also avoids the retain keys at each edited
# layer. 200 target steps: some targets are still far from EOS after 50 (early stop ends the others sooner).
# Measured misses: Gemma-2's and Gemma-3's post-norm caps the move of two layers (as in the paper's edit).
RETAIN_SETTINGS = ["retain_nullspace_weight=0.1", "v_num_grad_steps=200"]
RETAIN_MISSES = {
    "gemma2": "post-norm caps the move: forgets 1 of 2 facts",
    "gemma3": "post-norm caps the move: forgets 1 of 2 facts (tokyo 0.93 -> 0.31, still the argmax)",
}


@pytest.mark.parametrize(
    "arch",
    [
        pytest.param(a, marks=pytest.mark.xfail(a in RETAIN_MISSES, reason=RETAIN_MISSES.get(a, ""), strict=True))
        for a in sorted(ARCHS)
    ],
)
def test_retain_aware_edit_forgets_and_keeps(tmp_path, arch):
    model, tok = trained_model(arch)
    folder = tmp_path / arch
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    hp = _init(folder, tmp_path, "1,2", RETAIN_SETTINGS)
    before = corpus_perplexity(model, tok)
    requests = [{"prompt": p, "subject": s, "ground_truth": a} for p, s, a in FORGET]
    retain = [{"prompt": p, "subject": s} for p, s, _ in KEEP]
    apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False, fluency_text=GUARD_TEXT, retain=retain)
    forgot, kept = knows(model, tok, FORGET), knows(model, tok, KEEP)
    assert not any(forgot), forgot
    assert all(kept), kept
    assert corpus_perplexity(model, tok) / before - 1 < 0.10


@pytest.mark.parametrize("arch", [
    # Gemma-3's post-norm caps the move (KNOWN_MISSES): on an AMD AVX2 host the trace picks layers 0-1 and tokyo stays
    # the argmax; the outcome depends on the CPU kernel set the tiny model was trained with, so not strict
    pytest.param("gemma3", marks=pytest.mark.xfail(reason=KNOWN_MISSES["gemma3"], strict=False)),
    "llama",
])
def test_auto_layers_on_a_gemma3_class_model_forget_within_5_percent(tmp_path, arch):
    """``init-hparams --layers auto`` (a causal trace of the facts the model knows) writes a YAML whose edit
    forgets the facts, keeps the others and costs under +5% perplexity; Llama beside it."""
    model, tok = trained_model(arch)
    folder = tmp_path / arch
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    hp = _init(folder, tmp_path, "auto")
    assert len(hp.layers) == 2 and hp.layers[-1] < 3
    forgot, kept, increase = _forget_and_measure(model, tok, hp)
    assert not any(forgot) and all(kept) and increase < 0.05, (hp.layers, forgot, kept, increase)


def test_gemma3_targets_run_on_its_own_cached_layers(tmp_path, caplog, monkeypatch):
    """A trained Gemma-3: ``adam_kv`` evaluates on the model's own layers with a cache (no fallback note), and
    gives the targets of the full-forward ``adam`` loop."""
    from tiny_models import forget_requests, tiny_hparams_dict
    from zerounlearn_editor.engine.pipeline import neutral_targets
    from zerounlearn_editor.engine.targets.layer_kv import LayerKV

    model, tok = trained_model("gemma3")
    corpus = write_corpus(tmp_path / "c.jsonl")
    steps = []
    original = LayerKV.step
    monkeypatch.setattr(LayerKV, "step", lambda self, *a, **k: steps.append(1) or original(self, *a, **k))
    z = {}
    for optimizer in ("adam_kv", "adam"):
        hp = ZeroUnlearnGDHyperParams.from_dict(tiny_hparams_dict(tmp_path / "s", corpus, alg_name="ZeroUnlearn-GD",
                                                                  targets_optimizer=optimizer))
        with caplog.at_level("INFO", logger="zerounlearn_editor.engine.targets.kv_suffix"):
            z[optimizer] = neutral_targets(model, tok, forget_requests()[:2], hp).z
    assert not [r for r in caplog.records if "no KV-cached evaluation" in r.getMessage()]
    assert len(steps) > 1  # the check, then the optimiser's steps
    assert torch.allclose(z["adam_kv"], z["adam"], rtol=1e-4, atol=1e-4)
