"""ZeroUnlearn-GD end to end on tiny models, and batching invariances shared with ZeroUnlearn."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tiny_models import (
    CORPUS,
    forget_requests,
    tiny_gpt2,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
)
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.support.model_access import capture_inputs, get_module, get_weight_matrix


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture()
def paths(tmp_path: Path):
    return tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl")


def _gd(paths, gpt2=False, **overrides) -> ZeroUnlearnGDHyperParams:
    return ZeroUnlearnGDHyperParams.from_dict(
        tiny_hparams_dict(*paths, alg_name="ZeroUnlearn-GD", gpt2=gpt2, **overrides)
    )


def _corpus_keys(model, tok, module_name: str, passages: int) -> torch.Tensor:
    """Down_proj inputs of every token of the first passages, ``[d_in, tokens]``."""
    keys = []
    for text in CORPUS[:passages]:
        ids = tok(text, return_tensors="pt").input_ids
        with capture_inputs(model, [module_name]) as captured, torch.no_grad():
            model(ids)
        keys.append(captured[module_name][0])
    return torch.cat(keys).t().double()


@pytest.mark.parametrize("gpt2", [False, True])
def test_exact_gd_leaves_general_text_values_unchanged_at_the_first_layer(gpt2, tok, paths):
    """The update lies in the null space of C0: W' k = W k for keys of the statistics corpus.

    Three passages (~30 tokens) give C0 of rank < d_in = 64, so C0 has an exact null space.
    """
    model = (tiny_gpt2 if gpt2 else tiny_llama)(tok)
    hp = _gd(paths, gpt2=gpt2, nullspace_threshold=1e-12, mom2_n_samples=3)
    first = hp.rewrite_module_tmp.format(hp.layers[0])
    K_0 = _corpus_keys(model, tok, first, passages=3)
    assert K_0.shape[1] < K_0.shape[0]
    W_old = get_weight_matrix(get_module(model, first)).double().clone()
    model, weights_copy = apply_zerounlearn_gd_to_model(
        model, tok, forget_requests(), hp, return_orig_weights=True, progress=False
    )
    W_new = get_weight_matrix(get_module(model, first)).double()
    assert (W_new - W_old).norm() > 1e-3 * W_old.norm()
    assert ((W_new - W_old) @ K_0).norm() < 1e-6 * (W_old @ K_0).norm()
    assert set(weights_copy) == {f"{hp.rewrite_module_tmp.format(l)}.weight" for l in hp.layers}


def test_gd_solver_matches_exact_solver_on_the_model(tok, paths):
    model = tiny_llama(tok)
    exact, _ = apply_zerounlearn_gd_to_model(model, tok, forget_requests(), _gd(paths), copy=True, progress=False)
    gd, _ = apply_zerounlearn_gd_to_model(
        model, tok, forget_requests(), _gd(paths, solver="gd", gd_steps=3000), copy=True, progress=False
    )
    for layer in (1, 2):
        w_exact = exact.model.layers[layer].mlp.down_proj.weight
        w_gd = gd.model.layers[layer].mlp.down_proj.weight
        w_base = model.model.layers[layer].mlp.down_proj.weight
        assert (w_gd - w_exact).norm() < 1e-3 * (w_exact - w_base).norm()


@pytest.mark.parametrize("method", ["ZeroUnlearn", "ZeroUnlearn-GD"])
@pytest.mark.parametrize("optimizer, atol", [("adam", 1e-6), ("adam_kv", 1e-5)])
def test_chunked_keys_and_targets_do_not_change_the_result(method, optimizer, atol, tok, paths):
    """chunk_size=1 (one request per pass, as the reference pipeline) equals one batched pass; the paper's
    loop to 1e-6, the default cached loop to 1e-5 (its rows are grouped by width, so rounding differs)."""
    apply = apply_zerounlearn_to_model if method == "ZeroUnlearn" else apply_zerounlearn_gd_to_model
    cls = ZeroUnlearnHyperParams if method == "ZeroUnlearn" else ZeroUnlearnGDHyperParams
    model = tiny_llama(tok)
    results = []
    for chunk in (1, 64):
        hp = cls.from_dict(tiny_hparams_dict(*paths, alg_name=method, chunk_size=chunk, targets_optimizer=optimizer))
        edited, _ = apply(model, tok, forget_requests(), hp, copy=True, progress=False)
        results.append(edited.model.layers[2].mlp.down_proj.weight.detach())
    assert float((results[0] - model.model.layers[2].mlp.down_proj.weight).abs().max()) > 100 * atol  # an edit
    torch.testing.assert_close(results[0], results[1], rtol=1e-4, atol=atol)


# the keys every ZeroUnlearn(-GD) file must name although they have dataclass defaults (README table)
REQUIRED_YAML = (
    "rewrite_module_tmp: model.layers.{}.mlp.down_proj\nlayer_module_tmp: model.layers.{}\n"
    "mlp_module_tmp: model.layers.{}.mlp\nln_f_module: model.norm\nlm_head_module: lm_head\n"
    "stats_dir: ./stats\nmom2_dataset: wiki.jsonl\n"
)


def test_gd_hparams_are_strict(tmp_path):
    path = tmp_path / "gd.yaml"
    path.write_text("alg_name: ZeroUnlearn-GD\nmodel_name: x\nlayers: [1]\nsolver: newton\n")
    with pytest.raises(HParamsError, match="solver"):
        ZeroUnlearnGDHyperParams.from_hparams(path)
    path.write_text("alg_name: ZeroUnlearn-GD\nmodel_name: x\nlayers: [1]\nnorm_weigth: 0.1\n")
    with pytest.raises(HParamsError, match=r"unknown key\(s\) \['norm_weigth'\].*gd.yaml|gd.yaml.*norm_weigth"):
        ZeroUnlearnGDHyperParams.from_hparams(path)
    path.write_text("alg_name: ZeroUnlearn\nmodel_name: x\nlayers: [1]\n")
    with pytest.raises(HParamsError, match="alg_name"):
        ZeroUnlearnGDHyperParams.from_hparams(path)


@pytest.mark.parametrize("cls", [ZeroUnlearnHyperParams, ZeroUnlearnGDHyperParams])
def test_loss_layer_must_come_after_the_edited_layers(cls, tmp_path):
    path = tmp_path / "h.yaml"
    for loss_layer in (1, 2):
        path.write_text(
            f"alg_name: {cls.ALG_NAME}\nmodel_name: x\nlayers: [1, 2]\nv_loss_layer: {loss_layer}\n"
            + REQUIRED_YAML
            + ("utility_weight: 1.0\n" if cls is ZeroUnlearnHyperParams else "")
        )
        with pytest.raises(
            HParamsError,
            match=rf"h.yaml: key 'v_loss_layer' \({loss_layer}\) must be after the last edited layer \(2\)",
        ):
            cls.from_hparams(path)
    for loss_layer in (-1, 3):
        path.write_text(
            f"alg_name: {cls.ALG_NAME}\nmodel_name: x\nlayers: [1, 2]\nv_loss_layer: {loss_layer}\n"
            + REQUIRED_YAML
            + ("utility_weight: 1.0\n" if cls is ZeroUnlearnHyperParams else "")
        )
        assert cls.from_hparams(path).v_loss_layer == loss_layer


def test_many_facts_with_the_orthogonality_term_warn_and_point_to_the_many_yaml(tok, paths, caplog, monkeypatch):
    from zerounlearn_editor.methods.zerounlearn_gd import method

    paper, many = _gd(paths), _gd(paths, orthogonality_weight=0.0)
    assert method.many_facts_warning(method.MANY_FACTS, paper) is None
    assert "-many.yaml" in method.many_facts_warning(method.MANY_FACTS + 1, paper)
    assert method.many_facts_warning(10 * method.MANY_FACTS, many) is None
    # the edit itself logs it (a lower limit keeps the tiny edit small)
    monkeypatch.setattr(method, "MANY_FACTS", 1)
    model = tiny_llama(tok)
    with caplog.at_level("WARNING", logger=method.__name__):
        apply_zerounlearn_gd_to_model(model, tok, forget_requests()[:2], paper)
    assert any("orthogonality_weight 1" in r.getMessage() and "-many.yaml" in r.getMessage() for r in caplog.records)
