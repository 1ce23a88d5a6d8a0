"""The method registry (:mod:`zerounlearn_editor.methods.registry`) is the one place a method is declared.

A toy method, defined and registered in this test alone (and unregistered afterwards), is reachable
through ``unlearn`` (:func:`~zerounlearn_editor.applications.unlearn.run_unlearn`), the bench
(:func:`~zerounlearn_editor.bench.run_bench`), the speed bench's hparams loader, ``init-hparams``'s
choices, ``hparams_doc``'s table and EasyEdit's registration (a fake EasyEdit), with no other file touched.
Unknown names are errors listing the registered methods.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, List

import pytest
import torch
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.engine.hparams import EditHyperParams, HParamsError
from zerounlearn_editor.engine.pipeline import LayerProblem, apply_edit_method
from zerounlearn_editor.methods import registry
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

TOY = "ToyScale"
SCALE = 0.5


@dataclass
class ToyHyperParams(EditHyperParams):
    """The toy edit ``W' = scale W`` at the edited layers (the shared keys plus ``scale``)."""

    ALG_NAME: ClassVar[str] = TOY
    scale: float = dataclasses.field(default=SCALE, metadata={"help": "the toy's factor `W' = scale W`"})


CALLS: List[str] = []


def apply_toy_to_model(model, tok, requests, hparams: ToyHyperParams, copy=False, return_orig_weights=False,
                       keep_original_weight=False, **kwargs: Any):
    """EasyEdit's calling convention around the shared pipeline with the toy's solve."""
    CALLS.append(TOY)

    def solve(problem: LayerProblem) -> torch.Tensor:
        return problem.W.double() * hparams.scale

    return apply_edit_method(model, tok, requests, hparams, solve, copy, return_orig_weights, keep_original_weight,
                             **kwargs)


@pytest.fixture()
def toy() -> Iterator[registry.MethodEntry]:
    """The toy method, registered for one test."""
    CALLS.clear()
    entry = registry.register_method(registry.MethodEntry(TOY, ToyHyperParams, apply_toy_to_model))
    try:
        yield entry
    finally:
        registry.unregister_method(TOY)
    assert TOY not in registry.method_names()


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _toy_yaml(path: Path, root: Path, **changes: Any) -> Path:
    config = tiny_hparams_dict(root / "stats", write_corpus(root / "corpus.jsonl"), alg_name=TOY, **changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_shipped_methods_are_registered_with_their_classes():
    from zerounlearn_editor import (
        ZeroUnlearnGDHyperParams,
        ZeroUnlearnHyperParams,
        apply_zerounlearn_gd_to_model,
        apply_zerounlearn_to_model,
    )

    assert registry.method_names() == ["ZeroUnlearn", "ZeroUnlearn-GD"]
    assert registry.get_method("ZeroUnlearn").hparams_class is ZeroUnlearnHyperParams
    assert registry.get_method("ZeroUnlearn").apply is apply_zerounlearn_to_model
    assert registry.get_method("ZeroUnlearn-GD").hparams_class is ZeroUnlearnGDHyperParams
    assert registry.get_method("ZeroUnlearn-GD").apply is apply_zerounlearn_gd_to_model
    assert registry.get_method("ZeroUnlearn-GD").retain_variant == "-retain"
    assert dict(registry.get_method("ZeroUnlearn-GD").row_variants) == {"+R": "-retain", "+P": "-lifelong"}
    assert not registry.get_method("ZeroUnlearn").row_variants
    assert registry.get_method("ZeroUnlearn").adapter_rank_per_fact == 2


def test_unknown_name_lists_the_registered_ones(tmp_path):
    from zerounlearn_editor.methods.registry import load_method

    with pytest.raises(
        registry.UnknownMethodError, match=r"unknown method 'Nope'; registered: ZeroUnlearn, ZeroUnlearn-GD"
    ):
        registry.get_method("Nope")
    path = tmp_path / "x.yaml"
    path.write_text("alg_name: ZeroUnlern\nmodel_name: tiny\n", encoding="utf-8")
    with pytest.raises(
        HParamsError, match=r"x.yaml: key 'alg_name': unknown method 'ZeroUnlern'; registered: ZeroUnlearn"
    ):
        load_method(path)


def test_registration_checks_the_entry():
    with pytest.raises(ValueError, match="already registered"):
        registry.register_method(registry.get_method("ZeroUnlearn"))
    with pytest.raises(ValueError, match="ALG_NAME 'ToyScale'"):
        registry.register_method(registry.MethodEntry("Other", ToyHyperParams, apply_toy_to_model))
    with pytest.raises(TypeError, match="EditHyperParams"):
        registry.register_method(registry.MethodEntry(TOY, dict, apply_toy_to_model))  # type: ignore[arg-type]
    assert TOY not in registry.method_names()


def test_toy_method_reaches_unlearn(toy, tok, tmp_path):
    from zerounlearn_editor.applications.unlearn import UnlearnSettings, run_unlearn
    from zerounlearn_editor.methods.registry import load_method

    model_dir = tmp_path / "tiny-model"
    model = tiny_llama(tok)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    hparams_file = _toy_yaml(tmp_path / "toy.yaml", tmp_path, model_name=str(model_dir), scale=0.25)
    hp, apply = load_method(hparams_file)
    assert isinstance(hp, ToyHyperParams) and hp.scale == 0.25 and apply is apply_toy_to_model
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps([{"prompt": "the capital of france is", "subject": "france", "answer": "paris"}]))
    result = run_unlearn(hparams_file, facts, tmp_path / "out",
                         settings=UnlearnSettings(save="model", ppl_tokens=0, progress=False))
    assert CALLS == [TOY] and result.method == TOY
    from transformers import AutoModelForCausalLM

    edited = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    for layer in (1, 2):
        name = f"model.layers.{layer}.mlp.down_proj"
        assert torch.allclose(get_weight_matrix(get_module(edited, name)),
                              0.25 * get_weight_matrix(get_module(model, name)), atol=1e-6), "the toy's own edit ran"
    untouched = "model.layers.0.mlp.down_proj"
    assert torch.equal(
        get_weight_matrix(get_module(edited, untouched)), get_weight_matrix(get_module(model, untouched))
    )


def test_toy_method_reaches_the_bench_with_its_own_edit(toy, tok, tmp_path):
    from zerounlearn_editor.bench import BenchConfig, default_registry, run_bench

    registry_names = list(default_registry())
    assert TOY in registry_names and f"{TOY}+R" not in registry_names
    data = write_tiny_counterfact(tmp_path / "cf.json")
    main = _toy_yaml(tmp_path / "hparams" / TOY / "tiny.yaml", tmp_path)
    config = BenchConfig(hparams=str(main), data=str(data), seeds=[1], methods=["base", TOY], out=str(tmp_path / "out"),
                         n=2, ppl_tokens=0, progress=False)
    seen: List[torch.Tensor] = []
    model = tiny_llama(tok)
    before = get_weight_matrix(get_module(model, "model.layers.1.mlp.down_proj")).clone()

    def spying(*args: Any, **kwargs: Any):
        out = apply_toy_to_model(*args, **kwargs)
        seen.append(get_weight_matrix(get_module(args[0], "model.layers.1.mlp.down_proj")).clone())
        return out

    registry.register_method(dataclasses.replace(toy, apply=spying), replace=True)
    record = run_bench(config, model=model, tok=tok)
    assert CALLS == [TOY], "the bench ran the toy's apply, not another method's edit"
    assert torch.allclose(seen[0], SCALE * before, atol=1e-6)
    assert torch.equal(get_weight_matrix(get_module(model, "model.layers.1.mlp.down_proj")), before), "restored"
    stored = json.loads((tmp_path / "out" / "seed_1.json").read_text())
    assert stored["methods"][TOY]["status"] == "ok" and record is not None


def test_toy_method_reaches_speed_bench_init_hparams_and_hparams_doc(toy, tmp_path):
    from zerounlearn_editor.bench import speed_bench
    from zerounlearn_editor.cli import build_parser
    from zerounlearn_editor.cli.hparams_doc import key_table

    main = _toy_yaml(tmp_path / "hparams" / TOY / "tiny.yaml", tmp_path)
    hps = speed_bench._method_hparams(str(main), {}, [TOY])
    assert list(hps) == [TOY] and isinstance(hps[TOY], ToyHyperParams)
    with pytest.raises(ValueError, match="no per-request reference"):
        speed_bench._check_methods([TOY], ["ours", "per-request"])
    speed_bench._check_methods([TOY], ["ours"])
    args = build_parser().parse_args(["init-hparams", "--model", "m", "--out", "o.yaml", "--method", TOY])
    assert args.method == TOY
    row = next(line for line in key_table().splitlines() if line.startswith("| `scale` |"))
    assert f"| {TOY} | `{SCALE}` |" in row
    assert "| `layers` | all | required |" in key_table()


FAKE = {
    "util/alg_dict.py": "ALG_DICT = {'MEMIT': object()}\n",
    "editors/batch_editor.py": """
        class BatchEditor:
            @staticmethod
            def is_batchable_method(alg_name):
                return alg_name == 'MEMIT'
        """,
}


def test_toy_method_reaches_easyedit_registration(toy, tmp_path, monkeypatch):
    from zerounlearn_editor.integrations.easyedit import register_with_easyedit

    saved = {n: m for n, m in sys.modules.items() if n == "easyeditor" or n.startswith("easyeditor.")}
    for name in saved:
        del sys.modules[name]
    root = tmp_path / "fake"
    for sub in ("", "util", "editors"):
        (root / "easyeditor" / sub).mkdir(parents=True, exist_ok=True)
        (root / "easyeditor" / sub / "__init__.py").write_text("", encoding="utf-8")
    for rel, text in FAKE.items():
        (root / "easyeditor" / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    monkeypatch.delenv("EASYEDIT_PATH", raising=False)
    monkeypatch.setattr(
        sys, "path", [str(root)] + [p for p in sys.path if not (Path(p or ".") / "easyeditor").is_dir()]
    )
    importlib.invalidate_caches()
    try:
        assert register_with_easyedit()
        alg_dict = importlib.import_module("easyeditor.util.alg_dict").ALG_DICT
        batch = importlib.import_module("easyeditor.editors.batch_editor").BatchEditor
        assert (
            alg_dict[TOY] is apply_toy_to_model and alg_dict["ZeroUnlearn"] is registry.get_method("ZeroUnlearn").apply
        )
        assert batch.is_batchable_method(TOY) and batch.is_batchable_method("MEMIT")
        assert not batch.is_batchable_method("Nope")
    finally:
        for name in [n for n in sys.modules if n == "easyeditor" or n.startswith("easyeditor.")]:
            del sys.modules[name]
        sys.modules.update(saved)
        importlib.invalidate_caches()


def test_row_variants_are_bench_rows_and_only_the_retain_row_gets_the_retain_set(tmp_path):
    """A registered method's ``row_variants`` are its bench rows (row suffix -> YAML stem suffix), and only ``+R``
    is edited with the retain set; an undeclared row is an error naming the method's rows."""
    from zerounlearn_editor.bench import default_registry
    from zerounlearn_editor.bench.method_specs import HParamsLookup, MethodContext, edit_method_spec

    names = list(default_registry())
    assert {"ZeroUnlearn-GD+R", "ZeroUnlearn-GD+P"} <= set(names) and "ZeroUnlearn+R" not in names
    folder = tmp_path / "hparams" / "ZeroUnlearn-GD"
    folder.mkdir(parents=True)
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"), alg_name="ZeroUnlearn-GD")
    for suffix in ("", "-retain", "-lifelong"):
        (folder / f"tiny{suffix}.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    main = folder / "tiny.yaml"
    lookup = HParamsLookup(main, registry.get_method("ZeroUnlearn-GD").hparams_class.from_hparams(main))
    context = MethodContext(lookup, model=None, tok=None, work_dir=tmp_path, neutral_target="")
    for row, suffix, retain in (("ZeroUnlearn-GD", "", False), ("ZeroUnlearn-GD+R", "-retain", True),
                                ("ZeroUnlearn-GD+P", "-lifelong", False)):
        spec = edit_method_spec(row)
        assert spec.describe(lookup)["hparams"]["file"] == str(folder / f"tiny{suffix}.yaml")
        assert spec.prepare(context).uses_retain is retain, row
    with pytest.raises(registry.UnknownMethodError, match=r"ZeroUnlearn-GD has no \+X row \(its rows: "
                       r"ZeroUnlearn-GD\+R, ZeroUnlearn-GD\+P\)"):
        edit_method_spec("ZeroUnlearn-GD+X")
    with pytest.raises(registry.UnknownMethodError, match=r"ZeroUnlearn has no \+R row \(its rows: none\)"):
        edit_method_spec("ZeroUnlearn+R")
