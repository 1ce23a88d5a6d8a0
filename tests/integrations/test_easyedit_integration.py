"""Integration with EasyEdit (``zjunlp/EasyEdit``, which runs from its source tree).

Two groups of tests:

* always run: :func:`register_with_easyedit` against a FAKE minimal ``easyeditor`` package
  written into ``tmp_path`` (an ``ALG_DICT`` and a ``BatchEditor`` enum that batches MEMIT
  only), so registration, idempotence and the "no EasyEdit" path are checked everywhere;
* ``@pytest.mark.easyedit``: the real EasyEdit. They are skipped unless ``easyeditor`` can be
  imported: set ``EASYEDIT_PATH`` to an EasyEdit source tree (or put it on ``PYTHONPATH``)
  in an environment that has EasyEdit's own requirements installed.

EasyEdit quirks these tests work around (see the helpers below):

* ``BaseEditor`` accepts ``hparams.model_name = (model, tokenizer)``, but its evaluation
  (``compute_edit_quality``) then calls ``model_name.lower()`` and fails on the tuple; after
  construction ``editor.model_name`` is set to the model's name string.
* ``BaseEditor`` writes ``./logs/run.log`` and ``./logs/results.json`` in the working
  directory and adds two handlers to its logger per editor; the tests run in ``tmp_path``
  and remove those handlers again.
* ``easyeditor.util`` as a package *attribute* is shadowed by ``easyeditor.models.melo.util``
  (``from .models import *`` in ``easyeditor/__init__.py``), so ``import easyeditor.util.x as y``
  fails; modules are reached with :func:`importlib.import_module`.
"""
from __future__ import annotations

import importlib
import json
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import numpy as np
import pytest
import torch
import yaml

from tiny_models import (
    REPO_ROOT,
    forget_requests,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
    write_tiny_counterfact,
)
from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
)
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, fact_requests
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.hparams import load_config_file
from zerounlearn_editor.engine.stats import layer_second_moments, model_basename, stats_path
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.harness import BenchConfig, ModelFingerprint, easyedit_baselines, run_bench
from zerounlearn_editor.integrations import easyedit as ze_easyedit
from zerounlearn_editor.integrations.easyedit import easyedit_available, register_with_easyedit
from zerounlearn_editor.support.resources import hparams_path, shared_file

SKIP_REASON = (
    "EasyEdit is not importable: set EASYEDIT_PATH to an EasyEdit source tree "
    "(or put it on PYTHONPATH) in an environment with EasyEdit's requirements"
)


# --------------------------------------------------------------------------- fake EasyEdit

FAKE_ALG_DICT = """
def apply_memit_to_model(*args, **kwargs):
    return "memit"

ALG_DICT = {"MEMIT": apply_memit_to_model}
"""

FAKE_BATCH_EDITOR = """
from enum import Enum


class BatchEditor(Enum):
    MEMIT = "MEMIT"

    @staticmethod
    def is_batchable_method(alg_name: str):
        return alg_name == BatchEditor.MEMIT.value
"""


def _write_fake_easyedit(root: Path, broken: bool = False) -> Path:
    """A minimal ``easyeditor`` source tree under ``root`` (``broken``: alg_dict fails to import)."""
    package = root / "easyeditor"
    for sub in ("", "util", "editors"):
        (package / sub).mkdir(parents=True, exist_ok=True)
        (package / sub / "__init__.py").write_text("", encoding="utf-8")
    alg_dict = "raise ImportError('needs a package this environment lacks')\n" if broken else FAKE_ALG_DICT
    (package / "util" / "alg_dict.py").write_text(textwrap.dedent(alg_dict), encoding="utf-8")
    (package / "editors" / "batch_editor.py").write_text(textwrap.dedent(FAKE_BATCH_EDITOR), encoding="utf-8")
    return root


def _is_easyedit_module(name: str) -> bool:
    return name == "easyeditor" or name.startswith("easyeditor.")


@pytest.fixture()
def no_easyedit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hide any real EasyEdit: its modules, ``$EASYEDIT_PATH`` and source trees on ``sys.path``.

    The real modules (imported when ``zerounlearn_editor`` auto-registered) are put back
    afterwards, and every ``easyeditor`` module imported during the test is dropped.
    """
    saved = {name: module for name, module in sys.modules.items() if _is_easyedit_module(name)}
    for name in saved:
        del sys.modules[name]
    monkeypatch.delenv("EASYEDIT_PATH", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p or ".") / "easyeditor").is_dir()])
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for name in [n for n in sys.modules if _is_easyedit_module(n)]:
            del sys.modules[name]
        sys.modules.update(saved)
        importlib.invalidate_caches()


@pytest.fixture()
def fake_easyedit(tmp_path: Path, no_easyedit: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``easyeditor`` on ``sys.path`` (``sys.path`` is restored by monkeypatch)."""
    root = _write_fake_easyedit(tmp_path / "fake_easyedit")
    monkeypatch.syspath_prepend(str(root))
    return root


def _fake_modules() -> Tuple[Any, Any]:
    return (
        importlib.import_module("easyeditor.util.alg_dict"),
        importlib.import_module("easyeditor.editors.batch_editor").BatchEditor,
    )


def test_register_adds_both_methods_to_fake_easyedit(fake_easyedit: Path) -> None:
    assert register_with_easyedit() is True
    alg_dict, batch_editor = _fake_modules()
    assert alg_dict.__file__.startswith(str(fake_easyedit)), "the fake package must be the one imported"
    assert alg_dict.ALG_DICT["ZeroUnlearn"] is apply_zerounlearn_to_model
    assert alg_dict.ALG_DICT["ZeroUnlearn-GD"] is apply_zerounlearn_gd_to_model
    assert alg_dict.ALG_DICT["MEMIT"]() == "memit", "existing entries are kept"
    assert batch_editor.is_batchable_method("ZeroUnlearn")
    assert batch_editor.is_batchable_method("ZeroUnlearn-GD")
    assert batch_editor.is_batchable_method("MEMIT")
    assert not batch_editor.is_batchable_method("FOO")


def test_register_is_idempotent(fake_easyedit: Path) -> None:
    assert register_with_easyedit() is True
    alg_dict, batch_editor = _fake_modules()
    wrapped = batch_editor.__dict__["is_batchable_method"]
    entries = dict(alg_dict.ALG_DICT)

    assert register_with_easyedit() is True
    assert batch_editor.__dict__["is_batchable_method"] is wrapped, "the batch gate is wrapped only once"
    assert alg_dict.ALG_DICT == entries
    # One wrapper around the original: the original still decides for other names.
    assert batch_editor.is_batchable_method("MEMIT")
    assert not batch_editor.is_batchable_method("FOO")
    assert batch_editor.is_batchable_method("ZeroUnlearn-GD")


def test_register_through_easyedit_path(tmp_path: Path, no_easyedit: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``$EASYEDIT_PATH`` (or the ``path`` argument) names a source tree not on ``sys.path``."""
    root = _write_fake_easyedit(tmp_path / "tree")
    assert not easyedit_available()
    monkeypatch.setenv("EASYEDIT_PATH", str(root))
    assert register_with_easyedit() is True
    assert str(root) in sys.path
    alg_dict, _ = _fake_modules()
    assert {"ZeroUnlearn", "ZeroUnlearn-GD"} <= set(alg_dict.ALG_DICT)


def test_register_with_path_argument(tmp_path: Path, no_easyedit: None) -> None:
    root = _write_fake_easyedit(tmp_path / "tree")
    assert register_with_easyedit(str(root)) is True
    assert "ZeroUnlearn" in _fake_modules()[0].ALG_DICT


def test_register_without_easyedit_returns_false(no_easyedit: None) -> None:
    assert not easyedit_available()
    assert register_with_easyedit() is False
    assert not any(_is_easyedit_module(name) for name in sys.modules)


def test_register_with_nonexistent_easyedit_path_returns_false(
    tmp_path: Path, no_easyedit: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EASYEDIT_PATH", str(tmp_path / "missing"))
    assert register_with_easyedit() is False


def test_register_with_broken_easyedit_warns_and_returns_false(
    tmp_path: Path, no_easyedit: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = _write_fake_easyedit(tmp_path / "broken", broken=True)
    monkeypatch.syspath_prepend(str(root))
    with caplog.at_level(logging.WARNING, logger=ze_easyedit.__name__):
        assert register_with_easyedit() is False
    assert "failed to import" in caplog.text


# --------------------------------------------------------------------------- real EasyEdit


def _real_easyedit_importable() -> bool:
    if not easyedit_available():
        return False
    try:
        importlib.import_module("easyeditor.editors.editor")
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


@pytest.fixture(scope="module")
def easyedit() -> Dict[str, Any]:
    """The real EasyEdit modules, with our methods registered (skips when not importable)."""
    if not _real_easyedit_importable():
        pytest.skip(SKIP_REASON)
    assert register_with_easyedit() is True
    return {
        "editor": importlib.import_module("easyeditor.editors.editor"),
        "alg_dict": importlib.import_module("easyeditor.util.alg_dict"),
        "batch_editor": importlib.import_module("easyeditor.editors.batch_editor"),
        "memit_main": importlib.import_module("easyeditor.models.memit.memit_main"),
        "alphaedit_main": importlib.import_module("easyeditor.models.alphaedit.AlphaEdit_main"),
        "layer_stats": importlib.import_module("easyeditor.models.rome.layer_stats"),
    }


@pytest.fixture()
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run in ``tmp_path`` (EasyEdit writes ./logs) and drop the log handlers it adds."""
    monkeypatch.chdir(tmp_path)
    logger = logging.getLogger("easyeditor.editors.editor")
    before = list(logger.handlers)
    try:
        yield tmp_path
    finally:
        for handler in [h for h in logger.handlers if h not in before]:
            logger.removeHandler(handler)
            handler.close()


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Run single-threaded: these small forwards gain little from threads, and on a busy
    machine OpenMP spin-waiting made them up to a hundred times slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


class Recorder:
    """Wraps ``editor.apply_algo``: records each call's requests and the edited weights it left."""

    def __init__(self, apply_algo: Callable, weight_names: List[str]):
        self.apply_algo = apply_algo
        self.weight_names = weight_names
        self.requests: List[List[dict]] = []
        self.kwargs: List[Dict[str, Any]] = []
        self.edited: List[Dict[str, torch.Tensor]] = []

    def __call__(self, model, tok, requests, hparams, **kwargs):
        self.requests.append([dict(r) for r in requests])
        self.kwargs.append(dict(kwargs))
        edited_model, weights_copy = self.apply_algo(model, tok, requests, hparams, **kwargs)
        params = dict(edited_model.named_parameters())
        self.edited.append({name: params[name].detach().clone() for name in self.weight_names})
        return edited_model, weights_copy


def _weights(model, names: List[str]) -> Dict[str, torch.Tensor]:
    params = dict(model.named_parameters())
    return {name: params[name].detach().clone() for name in names}


def _weight_names(hparams) -> List[str]:
    return [f"{hparams.rewrite_module_tmp.format(layer)}.weight" for layer in hparams.layers]


def _make_editor(easyedit: Dict[str, Any], hparams, model) -> Tuple[Any, Recorder]:
    """``BaseEditor.from_hparams`` with ``model_name=(model, tok)``, plus a :class:`Recorder`.

    EasyEdit's evaluation calls ``model_name.lower()``, which the (model, tok) tuple lacks; the
    editor's ``model_name`` is therefore set to the model's name after construction.
    """
    editor = easyedit["editor"].BaseEditor.from_hparams(hparams)
    assert editor.model is model, "EasyEdit must use the model object it was given"
    assert editor.device == torch.device("cpu")
    editor.model_name = model_basename(model)
    recorder = Recorder(editor.apply_algo, _weight_names(hparams))
    editor.apply_algo = recorder
    return editor, recorder


def _tiny_setup(tmp_path: Path, tok, hparams_cls=ZeroUnlearnHyperParams, alg_name="ZeroUnlearn", **overrides):
    model = tiny_llama(tok)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    hparams = hparams_cls.from_dict(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name=alg_name, **overrides))
    # EasyEdit's in-memory model: BaseEditor takes model_name = (model, tok); a YAML/dict holds a name
    # only (validated as a string), so the tuple is set on the loaded hparams
    hparams.model_name = (model, tok)
    return model, hparams


def _edit_args(requests: List[dict]) -> Dict[str, Any]:
    """EasyEdit ``edit()``/``batch_edit()`` arguments: lists, ``subject`` as a keyword."""
    return dict(
        prompts=[r["prompt"] for r in requests],
        target_new=["the"] * len(requests),  # the neutral target each fact is replaced with
        ground_truth=[r["ground_truth"] for r in requests],
        subject=[r["subject"] for r in requests],
    )


def _assert_changed_then_restored(model, original, recorder: Recorder) -> None:
    for edited in recorder.edited:
        for name, value in edited.items():
            assert not torch.equal(value, original[name]), f"{name} was not edited"
    for name, value in _weights(model, list(original)).items():
        assert torch.equal(value, original[name]), f"EasyEdit did not restore {name}"


@pytest.mark.easyedit
def test_real_easyedit_sees_both_methods(easyedit: Dict[str, Any]) -> None:
    editor_alg_dict = easyedit["editor"].ALG_DICT  # the name editor.py imported with `import *`
    assert editor_alg_dict is easyedit["alg_dict"].ALG_DICT
    assert editor_alg_dict["ZeroUnlearn"] is apply_zerounlearn_to_model
    assert editor_alg_dict["ZeroUnlearn-GD"] is apply_zerounlearn_gd_to_model
    batch_editor = easyedit["batch_editor"].BatchEditor
    for name in ("ZeroUnlearn", "ZeroUnlearn-GD", "MEMIT", "AlphaEdit"):
        assert batch_editor.is_batchable_method(name), name
    assert not batch_editor.is_batchable_method("ROME")
    assert not batch_editor.is_batchable_method("FOO")


@pytest.mark.easyedit
def test_edit_runs_zerounlearn_per_request_and_restores(easyedit, in_tmp: Path, tok) -> None:
    """``edit()`` (batch_size 1): one call per request with subject/ground_truth, then restore."""
    model, hparams = _tiny_setup(in_tmp, tok)
    original = _weights(model, _weight_names(hparams))
    editor, recorder = _make_editor(easyedit, hparams, model)
    requests = forget_requests()
    metrics, edited_model, weights_copy = editor.edit(**_edit_args(requests), sequential_edit=False, eval_metric="ppl")

    assert [len(call) for call in recorder.requests] == [1, 1, 1]
    for call, request in zip(recorder.requests, requests):
        assert {k: call[0][k] for k in ("prompt", "subject", "ground_truth")} == {
            k: request[k] for k in ("prompt", "subject", "ground_truth")
        }
        assert call[0]["target_new"] == "the"
    assert all(kw["return_orig_weights"] and not kw["copy"] for kw in recorder.kwargs)
    _assert_changed_then_restored(model, original, recorder)
    assert edited_model is model, "EasyEdit returns its (restored) model, not an edited copy"
    assert set(weights_copy) == set(original)
    for name, value in weights_copy.items():
        assert torch.equal(value, original[name])
    # The post-edit metrics were computed on the edited model (on this random tiny model the
    # subject-token residual barely reaches the last position, so only a change is asserted).
    assert len(metrics) == len(requests)
    for metric in metrics:
        assert metric["post"]["rewrite_ppl"] != pytest.approx(metric["pre"]["rewrite_ppl"], rel=1e-6)
    assert (in_tmp / "logs" / "results.json").is_file()


@pytest.mark.easyedit
def test_sequential_edit_keeps_the_edits(easyedit, in_tmp: Path, tok) -> None:
    model, hparams = _tiny_setup(in_tmp, tok)
    original = _weights(model, _weight_names(hparams))
    editor, recorder = _make_editor(easyedit, hparams, model)
    editor.edit(**_edit_args(forget_requests()[:2]), sequential_edit=True)
    assert len(recorder.edited) == 2
    final = _weights(model, list(original))
    for name in original:
        assert torch.equal(final[name], recorder.edited[-1][name])
        assert not torch.equal(recorder.edited[0][name], recorder.edited[1][name]), "edits must accumulate"
        assert not torch.equal(final[name], original[name])


@pytest.mark.easyedit
def test_batch_edit_runs_zerounlearn_once_for_all_requests(easyedit, in_tmp: Path, tok) -> None:
    requests = forget_requests()
    model, hparams = _tiny_setup(in_tmp, tok, batch_size=len(requests))
    original = _weights(model, _weight_names(hparams))
    editor, recorder = _make_editor(easyedit, hparams, model)
    metrics, edited_model, weights_copy = editor.batch_edit(**_edit_args(requests), sequential_edit=False)

    assert [len(call) for call in recorder.requests] == [len(requests)]
    assert [r["subject"] for r in recorder.requests[0]] == [r["subject"] for r in requests]
    _assert_changed_then_restored(model, original, recorder)
    assert set(weights_copy) == set(original)
    assert len(metrics) == len(requests)
    for metric in metrics:
        assert {"pre", "post", "time", "requested_rewrite"} <= set(metric)
        assert metric["time"] > 0
        assert metric["requested_rewrite"]["subject"] in metric["requested_rewrite"]["prompt"]


@pytest.mark.easyedit
def test_batch_edit_result_matches_direct_call_whatever_the_padding_side(easyedit, in_tmp: Path, tok) -> None:
    """EasyEdit sets ``padding_side='left'`` when it loads a tokenizer for an unlisted method."""
    requests = forget_requests()
    results = []
    for side in ("left", "right"):
        side_tok = tiny_tokenizer()
        side_tok.padding_side = side
        model, hparams = _tiny_setup(in_tmp, side_tok, batch_size=len(requests))
        editor, recorder = _make_editor(easyedit, hparams, model)
        editor.batch_edit(**_edit_args(requests))
        results.append(recorder.edited[0])
    model, hparams = _tiny_setup(in_tmp, tok, batch_size=len(requests))
    with_target = [dict(r, target_new="the") for r in requests]  # what _edit_args passes
    direct, _ = apply_zerounlearn_to_model(model, tok, with_target, hparams, copy=True, progress=False)
    expected = _weights(direct, _weight_names(hparams))
    for result in results:
        for name, value in expected.items():
            assert torch.equal(result[name], value), name


@pytest.mark.easyedit
def test_normal_edit_reaches_zerounlearn(easyedit, in_tmp: Path, tok) -> None:
    """``normal_edit(prompts, target_new)`` builds requests without subject or ground_truth.

    Our method then reads the key at each prompt's last token; EasyEdit restores the weights.
    """
    requests = forget_requests()
    model, hparams = _tiny_setup(in_tmp, tok, batch_size=len(requests))
    original = _weights(model, _weight_names(hparams))
    editor, recorder = _make_editor(easyedit, hparams, model)
    editor.normal_edit(prompts=[r["prompt"] for r in requests], target_new=["the"] * len(requests))
    assert [len(call) for call in recorder.requests] == [len(requests)]
    assert recorder.requests[0][0]["ground_truth"] is None
    _assert_changed_then_restored(model, original, recorder)


@pytest.mark.easyedit
def test_batch_edit_runs_zerounlearn_gd(easyedit, in_tmp: Path, tok) -> None:
    requests = forget_requests()
    model, hparams = _tiny_setup(in_tmp, tok, ZeroUnlearnGDHyperParams, "ZeroUnlearn-GD", batch_size=len(requests))
    original = _weights(model, _weight_names(hparams))
    editor, recorder = _make_editor(easyedit, hparams, model)
    metrics, _, weights_copy = editor.batch_edit(**_edit_args(requests))
    assert [len(call) for call in recorder.requests] == [len(requests)]
    _assert_changed_then_restored(model, original, recorder)
    assert set(weights_copy) == set(original)
    assert len(metrics) == len(requests)


MODULE_TMP = "model.layers.{}.mlp.down_proj"


def _our_layer1_stats(model, tok, stats_dir: Path, corpus: Path, n_samples: int, dtype: str):
    """Our C0 statistics of layer 1's down_proj, written to ``stats_dir`` in EasyEdit's layout."""
    stats = layer_second_moments(
        model, tok, [1], MODULE_TMP, str(stats_dir), str(corpus), n_samples, dtype, max_length=32, batch_size=8,
        progress=False,
    )
    return stats[1]


def _no_dataset(*args, **kwargs):
    raise LookupError(f"EasyEdit tried to load a dataset: {args}")


@pytest.mark.easyedit
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("method", ["memit", "alphaedit"])
def test_easyedit_get_cov_reads_our_statistics_offline(
    easyedit, in_tmp: Path, tok, monkeypatch: pytest.MonkeyPatch, dtype: str, method: str
) -> None:
    """MEMIT's / AlphaEdit's ``get_cov`` load the file our ``layer_second_moments`` wrote."""
    layer_stats_module = easyedit["layer_stats"]
    monkeypatch.setattr(layer_stats_module, "load_dataset", _no_dataset)  # offline or fail
    main = easyedit["memit_main" if method == "memit" else "alphaedit_main"]
    monkeypatch.setattr(main, "COV_CACHE", {})  # EasyEdit's process-wide cache

    model = tiny_llama(tok)
    # A model loaded from a folder: both sides name the cache folder after its last part.
    model.config._name_or_path = str(in_tmp / "models" / "tiny-llama")
    corpus = write_corpus(in_tmp / "wikipedia.jsonl")  # ds_name "wikipedia", like EasyEdit's default
    stats_dir, module, n_samples = in_tmp / "stats", MODULE_TMP.format(1), 100
    ours = _our_layer1_stats(model, tok, stats_dir, corpus, n_samples, dtype)
    assert stats_path(str(stats_dir), "tiny-llama", "wikipedia", module, dtype, n_samples).is_file()
    hparams = ZeroUnlearnHyperParams.from_dict(tiny_hparams_dict(stats_dir, corpus, mom2_dtype=dtype))

    cov = main.get_cov(model, tok, module, "wikipedia", n_samples, dtype, hparams=hparams)
    expected = (ours.mom2.double() / ours.count).float()
    assert cov.dtype == torch.float32 and cov.shape == expected.shape
    torch.testing.assert_close(cov, expected, rtol=1e-6, atol=0)

    # The same file through layer_stats directly, and the same path on both sides.
    stat = layer_stats_module.layer_stats(
        model, tok, module, str(stats_dir), "wikipedia", to_collect=["mom2"],
        sample_size=n_samples, precision=dtype, hparams=hparams,
    )
    assert stat.mom2.count == ours.count
    assert np.allclose(stat.mom2.mom2.numpy(), ours.mom2.numpy(), rtol=1e-6, atol=0)
    assert model.config._name_or_path.rsplit("/")[-1] == model_basename(model)  # EasyEdit's folder name


@pytest.mark.easyedit
def test_easyedit_does_not_accept_our_file_for_another_sample_size(
    easyedit, in_tmp: Path, tok, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sample_size`` is part of the file name and checked inside the file: no silent reuse."""
    layer_stats_module = easyedit["layer_stats"]
    monkeypatch.setattr(layer_stats_module, "load_dataset", _no_dataset)
    model = tiny_llama(tok)
    corpus = write_corpus(in_tmp / "wikipedia.jsonl")
    _our_layer1_stats(model, tok, in_tmp / "stats", corpus, 100, "float32")
    hparams = ZeroUnlearnHyperParams.from_dict(tiny_hparams_dict(in_tmp / "stats", corpus))
    with pytest.raises(LookupError, match="tried to load a dataset"):
        layer_stats_module.layer_stats(
            model, tok, MODULE_TMP.format(1), str(in_tmp / "stats"), "wikipedia", to_collect=["mom2"],
            sample_size=200, precision="float32", hparams=hparams,
        )


# --------------------------------------------------------------------------- real model (slow)


def _smollm2_hparams(hparams_cls, alg_name: str, model, tok, stats_dir: Path, **overrides):
    """The shipped SmolLM2 YAML with the model tuple, CPU, the shared corpus and a short target loop."""
    try:
        corpus = shared_file("text/wiki_passages_3643.jsonl")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    config = load_config_file(hparams_path(alg_name, "SmolLM2-135M-Instruct"))
    config.update(
        device="cpu",  # EasyEdit turns an integer device into cuda:N
        stats_dir=str(stats_dir),
        mom2_dataset=str(corpus),
        **overrides,
    )
    hparams = hparams_cls.from_dict(config, source=f"{alg_name} SmolLM2 (test overrides)")
    hparams.model_name = (model, tok)  # the in-memory model EasyEdit is given (see _tiny_setup)
    return hparams


@pytest.mark.slow
@pytest.mark.easyedit
def test_smollm2_batch_edit_through_easyedit(easyedit, in_tmp: Path, request: pytest.FixtureRequest) -> None:
    """SmolLM2 given to ``BaseEditor`` as (model, tok); ``batch_edit()`` forgets two capitals.

    The answers are scored by EasyEdit as portability probes (teacher-forced token accuracy of
    ``ground_truth`` after the prompt): 1.0 before, 0.0 on the edited model.
    """
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    # Session fixtures are looked up only now, after the easyedit fixture could skip.
    smollm2_path = request.getfixturevalue("smollm2_path")
    smollm2_stats_dir = request.getfixturevalue("smollm2_stats_dir")
    model, tok = load_model_and_tokenizer(str(smollm2_path))
    requests = fact_requests(CAPITALS_TO_FORGET[:2])
    prompts, answers = [r["prompt"] for r in requests], [r["ground_truth"] for r in requests]
    hparams = _smollm2_hparams(
        ZeroUnlearnHyperParams, "ZeroUnlearn", model, tok, smollm2_stats_dir,
        batch_size=len(requests), v_num_grad_steps=10,
    )
    original = _weights(model, _weight_names(hparams))
    editor, recorder = _make_editor(easyedit, hparams, model)
    metrics, _, _ = editor.batch_edit(
        prompts=prompts,
        target_new=[tok.eos_token] * len(requests),  # our default neutral target, spelled out
        ground_truth=answers,
        subject=[r["subject"] for r in requests],
        portability_inputs={"forget": {"prompt": prompts, "ground_truth": answers}},
    )

    assert [len(call) for call in recorder.requests] == [len(requests)]
    _assert_changed_then_restored(model, original, recorder)
    assert len(metrics) == len(requests)
    for metric in metrics:
        assert np.mean(metric["pre"]["portability"]["forget_acc"]) == 1.0, "SmolLM2 knows the capital"
        assert np.mean(metric["post"]["portability"]["forget_acc"]) == 0.0, metric["requested_rewrite"]["prompt"]


def _eos_logprob(model, tok, requests: List[dict]) -> torch.Tensor:
    """``log p(EOS | prompt)`` at each request's prompt (subject filled in), ``[n]``, one batched pass."""
    prompts = [r["prompt"].format(r["subject"]) if "{}" in r["prompt"] else r["prompt"] for r in requests]
    probs = evaluate_probes(model, tok, [Probe(prompt, tok.eos_token) for prompt in prompts])["seq_prob"]
    return torch.tensor(probs, dtype=torch.float64).log()


@pytest.mark.easyedit
def test_bench_runs_easyedit_baselines_through_their_alg_dict(easyedit, in_tmp: Path, tok, monkeypatch) -> None:
    """``zerounlearn bench`` with EasyEdit's own FT/ROME/MEMIT/AlphaEdit on a tiny Llama.

    Each real apply function is wrapped to measure what it did: it must raise the probability of
    the neutral target (EOS) at the forget prompts it was given (its whole job), and the bench must
    hand back a bit-identical model after every method.
    """
    data = write_tiny_counterfact(in_tmp / "counterfact_tiny.json")
    ppl = in_tmp / "ppl.txt"
    ppl.write_text("the city of paris is a large city in france " * 6, encoding="utf-8")
    corpus = write_corpus(in_tmp / "corpus.jsonl")
    main_yaml = in_tmp / "hparams" / "ZeroUnlearn" / "tiny.yaml"
    main_yaml.parent.mkdir(parents=True)
    main_yaml.write_text(yaml.safe_dump(tiny_hparams_dict(in_tmp / "stats", corpus)), encoding="utf-8")

    api, reason = easyedit_baselines.load_easyedit()
    assert api is not None, reason
    gains: Dict[str, List[float]] = {}

    def measured(name: str, apply: Callable) -> Callable:
        def wrapper(model, tok_, requests, hparams, **kwargs):
            assert all(r["target_new"] == tok.eos_token for r in requests), "every method aims at the neutral target"
            before = _eos_logprob(model, tok_, requests)
            result = apply(model, tok_, requests, hparams, **kwargs)
            gains.setdefault(name, []).extend((_eos_logprob(model, tok_, requests) - before).tolist())
            return result

        return wrapper

    wrapped = easyedit_baselines.EasyEditAPI(
        {name: measured(name, fn) for name, fn in api.alg_dict.items() if name in easyedit_baselines.EASYEDIT_METHODS},
        api.hparams_classes,
        api.modules,
    )
    monkeypatch.setattr(easyedit_baselines, "load_easyedit", lambda: (wrapped, None))
    model = tiny_llama(tok)
    before = ModelFingerprint.of(model)
    methods = ["base", *easyedit_baselines.EASYEDIT_METHODS]
    config = BenchConfig(hparams=str(main_yaml), data=str(data), seeds=[1], methods=methods, out=str(in_tmp / "out"),
                         n=3, ppl_tokens=30, ppl_text=str(ppl), progress=False)
    run_bench(config, model=model, tok=tok)

    assert before.differences(model) == []
    record = json.loads((in_tmp / "out" / "seed_1.json").read_text())
    for name in easyedit_baselines.EASYEDIT_METHODS:
        entry = record["methods"][name]
        assert entry["status"] == "ok", (name, entry.get("error"))
        assert entry["details"]["calls"] == (3 if name == "ROME" else 1)
        assert len(gains[name]) == 3 and min(gains[name]) > 0, (name, gains[name])
    markdown = (in_tmp / "out" / "summary.md").read_text()
    assert "skipped" not in markdown and all(f"| {name} |" in markdown for name in methods)


@pytest.mark.easyedit
def test_fluency_guard_refuses_through_easyedit(easyedit, in_tmp: Path, tok, monkeypatch) -> None:
    """EasyEdit's ``edit()`` reaches the same pipeline, so the fluency guard acts there too: an edit that
    (here, by a stubbed measurement) raises the perplexity tenfold is refused and the weights are restored."""
    import zerounlearn_editor.engine.pipeline as pipeline
    from zerounlearn_editor.engine.fluency_guard import FluencyError

    readings = iter([10.0, 100.0])
    monkeypatch.setattr(pipeline, "guard_perplexity", lambda model, tok, chunks: next(readings))
    requests = forget_requests()[:1]
    model, hparams = _tiny_setup(in_tmp, tok)
    original = _weights(model, _weight_names(hparams))
    editor, _ = _make_editor(easyedit, hparams, model)
    with pytest.raises(FluencyError, match=r"from 10\.000 to 100\.000 \(\+900\.0%\)"):
        editor.edit(**_edit_args(requests))
    for name, value in _weights(model, list(original)).items():
        assert torch.equal(value, original[name])


@pytest.mark.slow
@pytest.mark.easyedit
def test_smollm2_by_name_through_base_editor(easyedit, in_tmp: Path, request: pytest.FixtureRequest) -> None:
    """The shipped SmolLM2 YAML (``model_name: smollm2``) through ``BaseEditor.from_hparams``, nothing loaded by hand.

    EasyEdit alone raises ``NotImplementedError`` for this name; the registration loads the
    prepared model offline. ``edit(sequential_edit=True)`` keeps the edit, ``batch_edit`` and
    ``normal_edit`` forget and restore; the answers are scored by EasyEdit (portability probes).
    """
    smollm2_path = request.getfixturevalue("smollm2_path")  # prepares the model folder when missing
    stats_dir = request.getfixturevalue("smollm2_stats_dir")
    shipped = ZeroUnlearnGDHyperParams.from_hparams(str(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct")))
    assert shipped.model_name == "smollm2" and shipped.batch_size == 1
    hparams = shipped.replace(stats_dir=str(stats_dir), v_num_grad_steps=10)  # the shared statistics cache
    editor = easyedit["editor"].BaseEditor.from_hparams(hparams)
    assert editor.model_name == "smollm2" and hparams.model_name == "smollm2", (
        "EasyEdit's evaluation needs a name string"
    )
    assert Path(editor.model.config._name_or_path).name == Path(smollm2_path).name
    assert editor.tok.padding_side == "left"  # what EasyEdit gives a method outside the ROME/MEMIT family
    names = _weight_names(hparams)
    original = _weights(editor.model, names)
    requests = fact_requests(CAPITALS_TO_FORGET[:3])
    prompts, answers = [r["prompt"] for r in requests], [r["ground_truth"] for r in requests]

    def forget_probe(sl: slice) -> Dict[str, Any]:
        return {"forget": {"prompt": prompts[sl], "ground_truth": answers[sl]}}

    # edit(): batch_size 1 as shipped; sequential_edit=True keeps the edit in the model
    metrics, _, _ = editor.edit(prompts=prompts[:1], target_new=[""], ground_truth=answers[:1],
                                subject=[requests[0]["subject"]], portability_inputs=forget_probe(slice(0, 1)),
                                sequential_edit=True)
    assert metrics[0]["pre"]["portability"]["forget_acc"] == [1.0]
    assert metrics[0]["post"]["portability"]["forget_acc"] == [0.0]
    kept = _weights(editor.model, names)
    assert all(not torch.equal(kept[n], original[n]) for n in names), "sequential_edit=True keeps the edit"
    with torch.no_grad():
        for name, param in editor.model.named_parameters():
            if name in original:
                param.copy_(original[name])

    # batch_edit(): both facts in one call, EasyEdit restores the weights afterwards
    hparams.batch_size = 2
    recorder = Recorder(editor.apply_algo, names)
    editor.apply_algo = recorder
    metrics, _, _ = editor.batch_edit(
        prompts=prompts[1:],
        target_new=[""] * 2,
        ground_truth=answers[1:],
        subject=[r["subject"] for r in requests[1:]],
        portability_inputs=forget_probe(slice(1, 3)),
    )
    assert [len(call) for call in recorder.requests] == [2]
    for metric in metrics:
        assert np.mean(metric["pre"]["portability"]["forget_acc"]) == 1.0
        assert np.mean(metric["post"]["portability"]["forget_acc"]) == 0.0, metric["requested_rewrite"]["prompt"]
    _assert_changed_then_restored(editor.model, original, recorder)

    # normal_edit(): requests without subject; the edit reaches our method and is undone
    editor.normal_edit(prompts=prompts[1:], target_new=[""] * 2)
    assert [len(call) for call in recorder.requests] == [2, 2]
    assert recorder.requests[1][0]["ground_truth"] is None
    _assert_changed_then_restored(editor.model, original, recorder)


@pytest.mark.easyedit
def test_base_editor_tuple_gets_a_name_string(easyedit, in_tmp: Path, tok) -> None:
    """``model_name = (model, tok)``: EasyEdit keeps the tuple; the registration sets the model's folder name."""
    model, hparams = _tiny_setup(in_tmp, tok)
    model.config._name_or_path = "/somewhere/tiny-model"
    editor = easyedit["editor"].BaseEditor.from_hparams(hparams)
    assert editor.model is model and editor.tok is tok
    assert editor.model_name == "tiny-model"


@pytest.mark.easyedit
def test_base_editor_unknown_name_fails_naming_it(easyedit, in_tmp: Path, tok) -> None:
    """A name neither EasyEdit nor the model zoo knows: an error naming it, not a bare NotImplementedError."""
    _, hparams = _tiny_setup(in_tmp, tok)
    hparams.model_name = str(in_tmp / "no-such-model")
    with pytest.raises(Exception, match="no-such-model") as info:
        easyedit["editor"].BaseEditor.from_hparams(hparams)
    assert not isinstance(info.value, NotImplementedError)
    assert hparams.model_name == str(in_tmp / "no-such-model")


def test_import_order_with_easyedit_on_the_path(tmp_path: Path) -> None:
    """``from easyeditor import ...`` before ``import zerounlearn_editor``: registration still reaches BaseEditor."""
    import subprocess

    root = _write_fake_easyedit(tmp_path / "tree")
    code = (
        "import easyeditor.util.alg_dict as a, easyeditor.editors.batch_editor as b\n"
        "import zerounlearn_editor\n"
        "assert 'ZeroUnlearn-GD' in a.ALG_DICT and b.BatchEditor.is_batchable_method('ZeroUnlearn')\n"
        "print('registered')\n"
    )
    repo = REPO_ROOT
    env = {k: v for k, v in __import__("os").environ.items() if k != "EASYEDIT_PATH"}
    env["PYTHONPATH"] = f"{root}{__import__('os').pathsep}{repo}"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "registered" in out.stdout, out.stderr[-2000:]


def test_ci_turns_a_skipped_easyedit_test_into_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ZEROUNLEARN_REQUIRE_EASYEDIT=1`` (``.ci/run``): an easyedit test that skips fails the run.

    The real test below runs in a nested pytest session in this process (``pytest.main``, this repository's
    ``tests/conftest.py``; a subprocess would import torch twice more), with EasyEdit not importable."""
    from conftest import REQUIRE_EASYEDIT_ENV

    monkeypatch.setattr(sys.modules[__name__], "_real_easyedit_importable", lambda: False)
    test_id = f"{Path(__file__).resolve()}::test_real_easyedit_sees_both_methods"

    def run(strict: bool) -> Tuple[int, List[pytest.TestReport]]:
        if strict:
            monkeypatch.setenv(REQUIRE_EASYEDIT_ENV, "1")
        else:
            monkeypatch.delenv(REQUIRE_EASYEDIT_ENV, raising=False)
        reports: List[pytest.TestReport] = []

        class Reports:
            def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
                reports.append(report)

        args = ["-q", "-p", "no:cacheprovider", "--rootdir", str(REPO_ROOT), test_id]
        return int(pytest.main(args, plugins=[Reports()])), reports

    rc, reports = run(strict=False)
    assert rc == pytest.ExitCode.OK and [r.outcome for r in reports if r.when == "setup"] == ["skipped"], reports
    rc, reports = run(strict=True)
    # the skip happens in the fixture: pytest reports a failed setup as an error
    failed = [r for r in reports if r.failed]
    assert rc == pytest.ExitCode.TESTS_FAILED and [r.when for r in failed] == ["setup"], reports
    assert f"{REQUIRE_EASYEDIT_ENV}=1 and this EasyEdit test skipped" in str(failed[0].longrepr)
    assert "EasyEdit is not importable" in str(failed[0].longrepr)
