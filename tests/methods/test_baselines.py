"""GA and NPO baselines on tiny models built in the test (no downloads)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from tiny_models import GPT2_TEMPLATES, REPO_ROOT, forget_requests, tiny_gpt2, tiny_llama, tiny_tokenizer
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.hparams import HParamsError, load_config_file
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.engine.requests import RequestError
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.teacher_forcing import encode_answers, sequence_log_probs
from zerounlearn_editor.methods.baselines import (
    GAHyperParams,
    NPOHyperParams,
    TrainReport,
    apply_ga_to_model,
    apply_npo_to_model,
    ga_loss,
    npo_loss,
)

REPO = REPO_ROOT
METHODS = {"GA": (GAHyperParams, apply_ga_to_model), "NPO": (NPOHyperParams, apply_npo_to_model)}
TARGETS = {"model.layers.1.mlp.down_proj.weight", "model.layers.2.mlp.down_proj.weight"}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from threads; on a shared machine extra threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture()
def model(tok):
    return tiny_llama(tok)


def _hparams(alg: str, **overrides):
    config = dict(
        alg_name=alg,
        model_name="tiny",
        device="cpu",
        layers=[1, 2],
        rewrite_module_tmp="model.layers.{}.mlp.down_proj",
        target_modules="layers",
        num_steps=5,
        lr=1e-2,
        optimizer="adam",
        weight_decay=0.0,
        max_grad_norm=1.0,
        retain_weight=0.0,
        seed=0,
    )
    if alg == "NPO":
        config["beta"] = 0.5
    config.update(overrides)
    return METHODS[alg][0].from_dict(config)


def _run(alg, model, tok, **kwargs):
    hp_keys = ("target_modules", "num_steps", "lr", "seed", "retain_weight", "optimizer")
    hp_overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in hp_keys}
    return METHODS[alg][1](model, tok, forget_requests(), _hparams(alg, **hp_overrides), progress=False, **kwargs)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _changed(model, state):
    return {k for k, v in model.state_dict().items() if not torch.equal(v, state[k])}


# ---------------------------------------------------------------- pure loss functions


def test_npo_loss_hand_checked_value():
    logp = torch.tensor([-2.0, -1.0])
    ref = torch.tensor([-1.0, -1.0])
    # beta = 0.5: request 0 has log ratio -1 -> 4 * log(1 + e^-0.5); request 1 has ratio 1 -> 4 * log 2
    expected = (4 * math.log(1 + math.exp(-0.5)) + 4 * math.log(2)) / 2
    assert npo_loss(logp, ref, 0.5).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(2.3344485, rel=1e-6)
    # the (2/beta) log(1 + (pi/pi_ref)^beta) form
    ratio = torch.exp(logp - ref)
    assert npo_loss(logp, ref, 0.5).item() == pytest.approx(((2 / 0.5) * torch.log1p(ratio**0.5)).mean().item())


def test_npo_gradient_at_reference_is_one_per_request():
    logp = torch.tensor([-3.0, -0.5, -1.0], requires_grad=True)
    loss = npo_loss(logp, logp.detach().clone(), 0.1)
    assert loss.item() == pytest.approx(2 / 0.1 * math.log(2))
    loss.backward()
    # d/dlogp (2/b) log(1 + e^{b d}) = 2 sigmoid(b d) = 1 at d = 0; mean over 3 requests
    assert torch.allclose(logp.grad, torch.full((3,), 1 / 3))


def test_npo_loss_rejects_bad_beta():
    with pytest.raises(ValueError, match="beta"):
        npo_loss(torch.zeros(1), torch.zeros(1), 0.0)


def test_ga_loss_is_token_mean_log_likelihood():
    logp = torch.tensor([-2.0, -4.0])
    n = torch.tensor([1, 3])
    assert ga_loss(logp, torch.zeros(2), n).item() == pytest.approx(-6.0 / 4)


# ---------------------------------------------------------------- batching


def test_sequence_log_probs_match_metrics_and_ignore_padding(tok, model):
    pairs = [(r["prompt"], r["ground_truth"]) for r in forget_requests()] + [("the capital of", "spain is madrid")]
    with torch.no_grad():
        batched = sequence_log_probs(model, encode_answers(tok, pairs))
        single = torch.cat([sequence_log_probs(model, encode_answers(tok, [p])) for p in pairs])
    assert torch.allclose(batched, single, atol=1e-5)
    seq_prob = evaluate_probes(model, tok, [Probe(p, a) for p, a in pairs])["seq_prob"]
    assert torch.allclose(batched, torch.log(torch.tensor(seq_prob)), atol=1e-4)


# ---------------------------------------------------------------- training behaviour


@pytest.mark.parametrize("alg", sorted(METHODS))
def test_loss_and_answer_log_prob_decrease(alg, tok, model):
    report = TrainReport()
    _run(alg, model, tok, report=report)
    assert report.steps == 5 and len(report.loss) == 5
    assert report.loss[-1] < report.loss[0]
    assert report.final_forget_logp < sum(report.reference_logp) / len(report.reference_logp) - 0.2
    assert report.forget_logp[0] == pytest.approx(sum(report.reference_logp) / 3, abs=1e-5)
    if alg == "NPO":
        assert report.loss[0] == pytest.approx(2 / 0.5 * math.log(2), rel=1e-5)


@pytest.mark.parametrize("alg", sorted(METHODS))
def test_layers_variant_changes_only_targets_and_restores_bit_identically(alg, tok, model):
    before = _state(model)
    edited, weights_copy = _run(alg, model, tok, return_orig_weights=True)
    assert edited is model
    assert set(weights_copy) == TARGETS
    assert _changed(model, before) == TARGETS
    restore_weights(model, weights_copy)
    assert _changed(model, before) == set()


@pytest.mark.parametrize("alg", sorted(METHODS))
def test_all_variant_changes_other_parameters(alg, tok, model):
    before = _state(model)
    _, weights_copy = _run(alg, model, tok, target_modules="all", return_orig_weights=True)
    assert set(weights_copy) == {name for name, _ in model.named_parameters()}
    changed = _changed(model, before)
    assert changed - TARGETS, "the all variant must change parameters outside the edit sites"
    assert "model.layers.0.self_attn.q_proj.weight" in changed
    restore_weights(model, weights_copy)
    assert _changed(model, before) == set()


def test_weights_copy_empty_without_return_orig_weights(tok, model):
    _, weights_copy = _run("GA", model, tok)
    assert weights_copy == {}


@pytest.mark.parametrize("flag", ["copy", "keep_original_weight"])
def test_copy_leaves_callers_model_untouched(flag, tok, model):
    before = _state(model)
    edited, _ = _run("NPO", model, tok, **{flag: True})
    assert edited is not model
    assert _changed(model, before) == set()
    assert _changed(edited, before) == TARGETS


@pytest.mark.parametrize("alg", sorted(METHODS))
def test_deterministic(alg, tok):
    first, second = tiny_llama(tok), tiny_llama(tok)
    _run(alg, first, tok, target_modules="all")
    _run(alg, second, tok, target_modules="all")
    assert _changed(first, _state(second)) == set()


def test_global_rng_state_unchanged(tok, model):
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    _run("NPO", model, tok, seed=7)
    assert torch.equal(torch.get_rng_state(), state)


def test_flags_and_mode_restored(tok, model):
    model.model.embed_tokens.weight.requires_grad_(False)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    assert not model.training
    _run("GA", model, tok, target_modules="layers")
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert not any(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    model.train()
    _run("GA", model, tok)
    assert all(m.training for m in model.modules())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_trains_and_keeps_dtype(dtype, tok):
    model = tiny_llama(tok).to(dtype)
    before = _state(model)
    report = TrainReport()
    _run("NPO", model, tok, report=report)
    assert report.dtype == str(dtype).replace("torch.", "")
    assert all(math.isfinite(v) for v in report.loss) and report.loss[-1] < report.loss[0]
    assert _changed(model, before) == TARGETS
    assert all(p.dtype == dtype for p in model.parameters())


def test_retain_loss_is_used_when_given(tok, model):
    report = TrainReport()
    retain = [{"prompt": "the capital of spain is", "ground_truth": "madrid"}]
    _run(
        "NPO",
        model,
        tok,
        retain_weight=1.0,
        retain_requests=retain,
        retain_texts=["many people live in london and it was known for its river"],
        report=report,
    )
    assert len(report.retain_nll) == 5 and all(v > 0 for v in report.retain_nll)


def test_gpt2_conv1d_sites(tok):
    model = tiny_gpt2(tok)
    before = _state(model)
    hp = _hparams("GA", rewrite_module_tmp=GPT2_TEMPLATES["rewrite_module_tmp"])
    _, weights_copy = apply_ga_to_model(model, tok, forget_requests(), hp, return_orig_weights=True, progress=False)
    assert set(weights_copy) == {"transformer.h.1.mlp.c_proj.weight", "transformer.h.2.mlp.c_proj.weight"}
    assert _changed(model, before) == set(weights_copy)


# ---------------------------------------------------------------- errors


def test_bad_requests_error_and_model_untouched(tok, model):
    before = _state(model)
    bad = forget_requests()
    bad[1] = dict(bad[1], subject="narnia")
    with pytest.raises(RequestError, match="request 1"):
        apply_ga_to_model(model, tok, bad, _hparams("GA"), progress=False)
    with pytest.raises(RequestError, match="empty"):
        apply_npo_to_model(model, tok, [], _hparams("NPO"), progress=False)
    assert _changed(model, before) == set()


def test_bad_layer_errors(tok, model):
    with pytest.raises(ValueError, match="layer 7"):
        apply_ga_to_model(model, tok, forget_requests(), _hparams("GA", layers=[1, 7]), progress=False)


def test_wrong_hparams_type(tok, model):
    with pytest.raises(TypeError, match="NPOHyperParams"):
        apply_npo_to_model(model, tok, forget_requests(), _hparams("GA"), progress=False)


def _write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "hp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_unknown_hparams_key_names_key_and_file(tmp_path):
    config = _hparams("NPO").to_dict()
    config["learning_rate"] = 1e-3
    path = _write(tmp_path, config)
    with pytest.raises(HParamsError, match="learning_rate") as info:
        NPOHyperParams.from_hparams(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "key, value",
    [("optimizer", "rmsprop"), ("target_modules", "some"), ("lr", 0.0), ("num_steps", 0), ("beta", -1.0)],
)
def test_bad_hparams_values_name_the_key(tmp_path, key, value):
    config = _hparams("NPO").to_dict()
    config[key] = value
    path = _write(tmp_path, config)
    with pytest.raises(HParamsError, match=key) as info:
        NPOHyperParams.from_hparams(path)
    assert str(path) in str(info.value)


def test_missing_and_wrong_alg_name(tmp_path):
    config = _hparams("GA").to_dict()
    del config["model_name"]
    with pytest.raises(HParamsError, match="model_name"):
        GAHyperParams.from_hparams(_write(tmp_path, config))
    with pytest.raises(HParamsError, match="alg_name"):
        NPOHyperParams.from_dict(_hparams("GA").to_dict())
    with pytest.raises(HParamsError, match="beta"):
        GAHyperParams.from_dict(dict(_hparams("GA").to_dict(), beta=0.1))


# ---------------------------------------------------------------- shipped YAMLs


@pytest.mark.parametrize("alg", sorted(METHODS))
@pytest.mark.parametrize("model_file", ["SmolLM2-135M-Instruct", "Llama-3.2-3B-Instruct"])
def test_shipped_yamls_load_and_match_zerounlearn_layers(alg, model_file):
    zero_layers = load_config_file(REPO / "hparams" / "ZeroUnlearn" / f"{model_file}.yaml")["layers"]
    layers_hp = METHODS[alg][0].from_hparams(REPO / "hparams" / alg / f"{model_file}.yaml")
    full_hp = METHODS[alg][0].from_hparams(REPO / "hparams" / alg / f"{model_file}-full.yaml")
    assert layers_hp.target_modules == "layers" and full_hp.target_modules == "all"
    assert layers_hp.layers == zero_layers == full_hp.layers
    assert layers_hp.rewrite_module_tmp == load_config_file(
        REPO / "hparams" / "ZeroUnlearn" / f"{model_file}.yaml"
    )["rewrite_module_tmp"]
