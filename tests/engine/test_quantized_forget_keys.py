"""Experimental ``quantized_forget_keys``: the forget keys also read on an RTN-rounded twin of the model."""
from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch
import yaml

from tiny_models import REPO_ROOT, forget_requests, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import ZeroUnlearnGDHyperParams
from zerounlearn_editor.engine import pipeline
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.quantized_keys import with_quantized_columns
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES, quantized_copy
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver

PAPER = REPO_ROOT / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct.yaml"
LEVER = REPO_ROOT / "benchmarks" / "deep" / "levers" / "retain-many-rank-w1-m8-k3-s50-qkeys-int4.yaml"
KEY = "quantized_forget_keys"


def test_the_twin_columns_come_after_the_originals_scaled_by_the_root_of_the_weight():
    K_f, K_q = torch.arange(6.0).reshape(2, 3), -torch.arange(6.0).reshape(2, 3)
    M_n, M_q = torch.ones(4, 3), 2 * torch.ones(4, 3)
    K, M = with_quantized_columns(K_f, M_n, K_q, M_q, weight=4.0)
    assert K.shape == (2, 6) and M.shape == (4, 6)
    assert torch.equal(K[:, :3], K_f) and torch.equal(M[:, :3], M_n)
    assert torch.equal(K[:, 3:], 2 * K_q) and torch.equal(M[:, 3:], 2 * M_q)
    # in a squared error a twin column weighs `weight` times an original: ||W K - M||^2 splits so
    W = torch.randn(4, 2)
    split = ((W @ K_f - M_n) ** 2).sum() + 4.0 * ((W @ K_q - M_q) ** 2).sum()
    assert torch.allclose(((W @ K - M) ** 2).sum(), split)
    with pytest.raises(ValueError, match="do not match"):
        with_quantized_columns(K_f, M_n, K_q[:, :2], M_q[:, :2], 1.0)


def _paper_with(value):
    config = yaml.safe_load(PAPER.read_text())
    config[KEY] = value
    return config


@pytest.mark.parametrize("value, field, message", [
    ({"scheme": "int3", "weight": 1.0}, "scheme", r"must be one of \['int4', 'int4g16', 'int8'\], got 'int3'"),
    ({"scheme": 4, "weight": 1.0}, "scheme", "got 4"),
    ({"scheme": "int4", "weight": 0.0}, "weight", "finite number > 0, got 0.0"),
    ({"scheme": "int4", "weight": float("inf")}, "weight", "got inf"),
    ({"scheme": "int4", "weight": True}, "weight", "got True"),
    ({"scheme": "int4", "weight": "1"}, "weight", "got '1'"),
])
def test_bad_values_are_refused_naming_the_field(value, field, message):
    with pytest.raises(HParamsError, match=rf"x\.yaml: field '{KEY}\.{field}' .*{message}"):
        ZeroUnlearnGDHyperParams.from_dict(_paper_with(value), source="x.yaml")


@pytest.mark.parametrize("value", ["int4", {"scheme": "int4"}, {"scheme": "int4", "weight": 1.0, "x": 1}])
def test_a_setting_that_is_not_the_two_fields_is_refused(value):
    with pytest.raises(HParamsError, match=rf"x\.yaml: key '{KEY}' must be a mapping with exactly the "
                                           r"fields \['scheme', 'weight'\]"):
        ZeroUnlearnGDHyperParams.from_dict(_paper_with(value), source="x.yaml")


def test_a_field_in_scientific_notation_is_a_number():
    """YAML 1.1 reads ``5e-1`` as a string; the setting's field is converted like a top-level number."""
    assert ZeroUnlearnGDHyperParams.from_dict(_paper_with({"scheme": "int4", "weight": "5e-1"})).quantized_forget_keys \
        == {"scheme": "int4", "weight": 0.5}


def test_the_lever_yaml_is_rm_r8_plus_the_key():
    lever = yaml.safe_load(LEVER.read_text())
    rm_r8 = yaml.safe_load((LEVER.parent / "retain-many-rank-w1-m8-k3-s50.yaml").read_text())
    assert lever.pop(KEY) == {"scheme": "int4", "weight": 1.0}
    assert lever == rm_r8
    assert ZeroUnlearnGDHyperParams.from_hparams(LEVER).quantized_forget_keys == {"scheme": "int4", "weight": 1.0}


def _edit(tmp_path: Path, setting, problems, model=None, outputs=None):
    """An edit of the tiny Llama (bare prompts only), recording each layer's problem (and, given ``outputs``, the
    solve's ``W'``); returns the edited model and the unedited copy."""
    tok = tiny_tokenizer()
    model = model or tiny_llama(tok).eval()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "c.jsonl"), alg_name="ZeroUnlearn-GD",
                               nullspace_threshold=1e-2, context_template_count=0,
                               **({KEY: setting} if setting else {}))
    hparams = ZeroUnlearnGDHyperParams.from_dict(config)
    solve = zerounlearn_gd_solver(hparams)

    def recording(problem):
        problems.append(problem)
        new_W = solve(problem)
        if outputs is not None:
            outputs.append((problem.layer, new_W))
        return new_W

    pipeline.run_layerwise_edit(model, tok, forget_requests(), hparams, recording, progress=False,
                                fluency_guard="off")
    return tok, model, before


def _keys(model, tok, layer: int) -> torch.Tensor:
    module = f"model.layers.{layer}.mlp.down_proj"
    return read_keys_and_hidden(model, tok, normalize_requests(forget_requests()), [""], module, module,
                                "subject_last", 64).keys.double()


@pytest.mark.parametrize("scheme", ["int4", "int4g16"])
def test_the_solve_gets_the_twin_keys_of_the_rounded_model_with_the_same_residual(tmp_path, scheme):
    """Per edited layer: ``K_f`` is ``[d_in, 2n]``; its first ``n`` columns are the model's own keys (at the first
    layer, with ``M_n``, the key-less edit's bit for bit; at layer 2 those of the edited model); the last ``n`` are
    the keys of the rounded model as edited so far (layer 1: the rounded unedited model; layer 2: the rounded final
    edit, whose keys there do not depend on layer 2's own weight) and their targets move ``W k_q`` by the same
    residual change as ``W k``."""
    plain, lever = [], []
    _edit(tmp_path, None, plain)
    tok, model, before = _edit(tmp_path, {"scheme": scheme, "weight": 1.0}, lever)
    n = len(forget_requests())
    assert [p.layer for p in lever] == [1, 2] and all(p.K_f.shape[1] == n for p in plain)
    unedited = tiny_llama(tok).eval()
    twins = {1: quantized_copy(unedited, QUANT_SCHEMES[scheme]), 2: quantized_copy(model, QUANT_SCHEMES[scheme])}
    for old, new in zip(plain, lever):
        assert new.K_f.shape == (64, 2 * n) and new.M_n.shape == (32, 2 * n)
        if new.layer == 1:
            assert torch.equal(new.K_f[:, :n], old.K_f) and torch.equal(new.M_n[:, :n], old.M_n)
        else:
            assert torch.allclose(new.K_f[:, :n], _keys(model, tok, 2), rtol=1e-6, atol=1e-7)
        K_q = new.K_f[:, n:]
        assert not torch.allclose(K_q, old.K_f, atol=1e-3)  # rounding moved the keys
        assert torch.allclose(K_q, _keys(twins[new.layer], tok, new.layer), rtol=1e-6, atol=1e-7)
        change = new.M_n - new.W @ new.K_f
        assert torch.allclose(change[:, n:], change[:, :n], atol=1e-10)
    # the twin columns changed the first layer's edit, and so the keys the second layer reads
    assert not torch.allclose(plain[1].K_f, lever[1].K_f[:, :n], atol=1e-6)


def test_the_twin_leaves_the_model_and_is_freed(tmp_path, monkeypatch):
    """The rounded twin never writes into the edited model (every weight but the edited ones bit-identical, the
    edited ones exactly the solve's unrounded ``W'``) and is released when the edit ends; a solve that fails after
    the first write-back restores the weights and releases it too."""
    made, twins = [], []
    original = pipeline.quantized_twin

    def spy(*args, **kwargs):
        twin = original(*args, **kwargs)
        made.append(weakref.ref(twin.model))
        twins.append(twin)
        return twin

    monkeypatch.setattr(pipeline, "quantized_twin", spy)
    outputs = []
    tok, model, before = _edit(tmp_path, {"scheme": "int4", "weight": 2.0}, [], outputs=outputs)
    assert twins[0].model is None and twins[0].replay is None  # closed by the edit, not by the garbage collector
    edited = {f"model.layers.{layer}.mlp.down_proj.weight" for layer in (1, 2)}
    params = dict(model.named_parameters())
    for name, value in params.items():
        assert torch.equal(value, before[name]) is (name not in edited), name
    assert [layer for layer, _ in outputs] == [1, 2]
    for layer, new_W in outputs:  # the write-back is the solve's W', never the twin's rounded copy of it
        weight = params[f"model.layers.{layer}.mlp.down_proj.weight"]
        assert torch.equal(weight, new_W.to(weight.dtype))
    gc.collect()
    assert made and made[0]() is None

    failing = tiny_llama(tok).eval()
    saved = {name: p.detach().clone() for name, p in failing.named_parameters()}
    calls = []
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "c.jsonl"), alg_name="ZeroUnlearn-GD",
                               nullspace_threshold=1e-2, **{KEY: {"scheme": "int8", "weight": 1.0}})
    hparams = ZeroUnlearnGDHyperParams.from_dict(config)
    solve = zerounlearn_gd_solver(hparams)

    def second_fails(problem):
        calls.append(problem.layer)
        if len(calls) == 2:
            raise RuntimeError("solve failed")
        return solve(problem)

    with pytest.raises(RuntimeError, match="solve failed"):
        pipeline.run_layerwise_edit(failing, tok, forget_requests(), hparams, second_fails, progress=False,
                                    fluency_guard="off")
    assert all(torch.equal(p, saved[name]) for name, p in failing.named_parameters())
    assert twins[1].model is None and twins[1].replay is None
    gc.collect()
    assert len(made) == 2 and made[1]() is None


def test_zerounlearn_refuses_the_key():
    """ZeroUnlearn's projector erases the span of every forget value column whatever the twin's weight, so the key is
    a key of ZeroUnlearn-GD only."""
    from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams

    config = yaml.safe_load((REPO_ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml").read_text())
    config[KEY] = {"scheme": "int4", "weight": 1.0}
    with pytest.raises(HParamsError, match=rf"x\.yaml: unknown key\(s\) \['{KEY}'\] for ZeroUnlearnHyperParams"):
        ZeroUnlearnHyperParams.from_dict(config, source="x.yaml")


def test_forget_columns_per_request():
    """1 without the key, 2 with it; an attribute set on a ZeroUnlearn object (whose class has no such key, so its
    checks never see it) is not read."""
    from zerounlearn_editor.engine.quantized_keys import forget_columns_per_request, quantized_keys_setting
    from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams

    paper_zu = REPO_ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml"
    multiplicative = ZeroUnlearnHyperParams.from_hparams(paper_zu)
    object.__setattr__(multiplicative, KEY, {"scheme": "bogus", "weight": -1})
    assert quantized_keys_setting(multiplicative) is None and forget_columns_per_request(multiplicative) == 1

    assert forget_columns_per_request(ZeroUnlearnGDHyperParams.from_hparams(PAPER)) == 1
    assert forget_columns_per_request(ZeroUnlearnGDHyperParams.from_hparams(LEVER)) == 2

