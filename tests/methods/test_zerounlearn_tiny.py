"""ZeroUnlearn end to end on tiny Llama / GPT-2 / Qwen3 models built in the test."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from tiny_models import (
    forget_requests,
    tiny_gpt2,
    tiny_hparams_dict,
    tiny_llama,
    tiny_qwen3,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor import (
    EditReport,
    RequestError,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_to_model,
    restore_weights,
)
from zerounlearn_editor.engine.contexts import CONTEXT_SEED, context_prefixes
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.support.model_access import ModuleNotFoundInModel, get_module, get_weight_matrix

BUILDERS = {"llama": (tiny_llama, False), "gpt2": (tiny_gpt2, True), "qwen3": (tiny_qwen3, False)}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture()
def workdir(tmp_path: Path):
    return tmp_path, write_corpus(tmp_path / "corpus.jsonl")


def _hparams(workdir, gpt2=False, **overrides):
    stats_dir, corpus = workdir[0] / "stats", workdir[1]
    return ZeroUnlearnHyperParams.from_dict(tiny_hparams_dict(stats_dir, corpus, gpt2=gpt2, **overrides))


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same_state(model, state):
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_forget_values_are_annihilated_at_every_layer(arch, tok, workdir):
    builder, gpt2 = BUILDERS[arch]
    model = builder(tok)
    original = copy.deepcopy(model)
    hp = _hparams(workdir, gpt2=gpt2)
    model, weights_copy = apply_zerounlearn_to_model(
        model, tok, forget_requests(), hp, return_orig_weights=True, progress=False
    )
    requests = normalize_requests(forget_requests())
    prefixes = context_prefixes(model, tok, hp.context_template_count, hp.context_template_length, CONTEXT_SEED)
    for layer in hp.layers:
        name = hp.rewrite_module_tmp.format(layer)
        # Keys at layer l depend only on layers < l, which were edited before layer l was solved.
        keys = read_keys_and_hidden(
            model, tok, requests, prefixes, name, hp.layer_module_tmp.format(hp.layers[-1]), hp.fact_token, 8
        ).keys.double()
        W_old = get_weight_matrix(get_module(original, name)).double()
        W_new = get_weight_matrix(get_module(model, name)).double()
        M_f = W_old @ keys
        assert (M_f.t() @ W_new @ keys).abs().max() < 1e-4 * M_f.norm() ** 2
        assert not torch.equal(W_old, W_new)
    # Only the edited weights changed, and weights_copy names exactly those parameters.
    expected = {f"{hp.rewrite_module_tmp.format(l)}.weight" for l in hp.layers}
    assert set(weights_copy) == expected
    for name, value in original.named_parameters():
        if name not in expected:
            assert torch.equal(value, dict(model.named_parameters())[name]), name


def test_restoring_weights_copy_is_bit_identical(tok, workdir):
    model = tiny_llama(tok)
    before = _state(model)
    ids = tok("the capital of france is", return_tensors="pt").input_ids
    logits_before = model(ids).logits
    hp = _hparams(workdir)
    model, weights_copy = apply_zerounlearn_to_model(
        model, tok, forget_requests(), hp, return_orig_weights=True, progress=False
    )
    assert not torch.equal(model(ids).logits, logits_before)
    restore_weights(model, weights_copy)
    _assert_same_state(model, before)
    assert torch.equal(model(ids).logits, logits_before)


def test_copy_true_leaves_the_callers_model_untouched(tok, workdir):
    model = tiny_gpt2(tok)
    before = _state(model)
    hp = _hparams(workdir, gpt2=True)
    edited, weights_copy = apply_zerounlearn_to_model(model, tok, forget_requests(), hp, copy=True, progress=False)
    assert edited is not model
    assert weights_copy == {}
    _assert_same_state(model, before)
    name = "transformer.h.1.mlp.c_proj.weight"
    assert not torch.equal(dict(edited.named_parameters())[name], before[name])


def test_deterministic_under_a_seed(tok, workdir):
    hp = _hparams(workdir)
    results = []
    for _ in range(2):
        model = tiny_llama(tok, seed=3)
        model, _ = apply_zerounlearn_to_model(model, tok, forget_requests(), hp, progress=False)
        results.append(_state(model))
    for name in results[0]:
        assert torch.equal(results[0][name], results[1][name]), name


def test_neutral_target_is_learned_in_the_residual(tok, workdir):
    """The optimised residual makes EOS likely (NLL drops below 0.5 from ~4.4).

    ``fact_token: last`` puts the residual on the predicting token itself: in a random tiny
    model, attention barely carries a subject-token residual to the last position. The random
    lm_head (std 0.02) is scaled up so that logits can move by more than a few tenths.
    """
    model = tiny_llama(tok)
    with torch.no_grad():
        model.lm_head.weight.mul_(100.0)
    hp = _hparams(
        workdir,
        fact_token="last",
        v_num_grad_steps=30,
        v_lr=0.5,
        clamp_norm_factor=50.0,
        v_weight_decay=0.0,
        kl_factor=0.0,
    )
    report = EditReport()
    apply_zerounlearn_to_model(model, tok, forget_requests(), hp, copy=True, report=report, progress=False)
    assert max(report.target_nll) < 0.5
    assert set(report.timings) >= {"statistics", "contexts", "targets", "keys", "solve", "write_back"}


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r[0].update(subject="italy"), "request 0: subject 'italy' does not occur"),
        (lambda r: r[1].update(ground_truth=" "), "request 1: field 'ground_truth' is empty"),
        (lambda r: r[2].pop("prompt"), "request 2: missing field 'prompt'"),
        (lambda r: r.clear(), "request list is empty"),
    ],
)
def test_bad_requests_raise_and_leave_model_unchanged(mutate, message, tok, workdir):
    model = tiny_llama(tok)
    before = _state(model)
    requests = forget_requests()
    mutate(requests)
    with pytest.raises(RequestError, match=message):
        apply_zerounlearn_to_model(model, tok, requests, _hparams(workdir), progress=False)
    _assert_same_state(model, before)


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"layers": [1, 9]}, ValueError, "layer 9 is out of range"),
        ({"rewrite_module_tmp": "model.layers.{}.mlp.nothing"}, ModuleNotFoundInModel, "model.layers.1.mlp.nothing"),
        ({"mom2_dataset": "/nonexistent/corpus.jsonl"}, ValueError, "corpus file not found"),
    ],
)
def test_bad_configuration_raises_and_leaves_model_unchanged(overrides, error, message, tok, workdir):
    model = tiny_llama(tok)
    before = _state(model)
    with pytest.raises(error, match=message):
        apply_zerounlearn_to_model(model, tok, forget_requests(), _hparams(workdir, **overrides), progress=False)
    _assert_same_state(model, before)


def test_empty_corpus_raises(tok, workdir):
    empty = workdir[0] / "empty.jsonl"
    empty.write_text("\n")
    model = tiny_llama(tok)
    before = _state(model)
    with pytest.raises(ValueError, match="empty"):
        apply_zerounlearn_to_model(
            model, tok, forget_requests(), _hparams(workdir, mom2_dataset=str(empty)), progress=False
        )
    _assert_same_state(model, before)


def test_non_finite_solve_restores_every_layer(tok, workdir, monkeypatch):
    """A failure at the second layer's solve undoes the first layer's write-back."""
    import zerounlearn_editor.methods.zerounlearn.method as main

    model = tiny_llama(tok)
    before = _state(model)
    real = main.zerounlearn_multiplier
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        D = real(*args, **kwargs)
        return D * float("nan") if calls["n"] == 2 else D

    monkeypatch.setattr(main, "zerounlearn_multiplier", flaky)
    with pytest.raises(ValueError, match="non-finite"):
        apply_zerounlearn_to_model(model, tok, forget_requests(), _hparams(workdir), progress=False)
    assert calls["n"] == 2
    _assert_same_state(model, before)


def test_subject_placeholder_prompt_is_accepted(tok, workdir):
    requests = [{"prompt": "the capital of {} is", "subject": "france", "ground_truth": "paris"}]
    model = tiny_llama(tok)
    edited, _ = apply_zerounlearn_to_model(model, tok, requests, _hparams(workdir), copy=True, progress=False)
    assert not torch.equal(
        edited.model.layers[1].mlp.down_proj.weight, model.model.layers[1].mlp.down_proj.weight
    )


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("loss_layer", [-1, 2])
def test_prefix_reuse_gives_the_same_targets_as_full_forwards(arch, loss_layer, tok):
    """Running only the layers after the edited one (cached prefix) equals hooking the full model."""
    from dataclasses import replace

    from zerounlearn_editor.engine.encoding import target_token_ids
    from zerounlearn_editor.engine.targets import (
        TargetConfig,
        loss_layer_module,
        optimise_neutral_targets,
    )

    model = BUILDERS[arch][0](tok)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    requests = normalize_requests(forget_requests())
    prefixes = context_prefixes(model, tok, 2, 3, 0)
    cfg = TargetConfig(
        layer_module="model.layers.1", ln_f_module="model.norm", lm_head_module="lm_head",
        loss_layer_module=loss_layer_module(model, loss_layer, "model.layers.{}"), fact_token="subject_last",
        steps=8, lr=0.5, weight_decay=1e-3, clamp_norm_factor=20.0, kl_factor=0.1, early_stop_loss=0.05, chunk_size=8,
    )
    from zerounlearn_editor.engine.targets.kv_suffix import SuffixLayers

    assert SuffixLayers.supported(model, cfg.layer_module, cfg.ln_f_module)
    ids = [target_token_ids(tok, None)] * len(requests)
    fast = optimise_neutral_targets(model, tok, requests, ids, prefixes, cfg)
    slow = optimise_neutral_targets(model, tok, requests, ids, prefixes, replace(cfg, reuse_prefix=False))
    torch.testing.assert_close(fast.h0, slow.h0, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.z, slow.z, rtol=1e-4, atol=1e-5)
    assert fast.steps_run == slow.steps_run
    assert len(model.model.layers) == 4  # the layer list is restored


def test_requests_without_subject_or_answer_use_the_whole_prompt():
    """EasyEdit's normal_edit sends neither: the key falls on the prompt's last token."""
    (request,) = normalize_requests([{"prompt": "the capital of france is", "ground_truth": None}])
    assert (request.prefix, request.subject, request.suffix, request.answer) == (
        "",
        "the capital of france is",
        "",
        None,
    )
    with pytest.raises(RequestError, match="request 0: field 'ground_truth' is empty"):
        normalize_requests([{"prompt": "the capital of france is", "subject": "france", "ground_truth": ""}])
