"""The method registry (:mod:`zerounlearn_editor.methods.registry`) is the one place a method is declared.

A toy method, registered in a test with one call (:func:`~zerounlearn_editor.methods.registry.registered`, which
unregisters it on leaving), appears in every consumer: ``unlearn``, the bench (rows, defaults, ``--methods`` help,
its own edit), the speed bench, ``init-hparams``'s choices, the ``alg_name`` help and the README key table,
unknown-name errors and EasyEdit's registration (a fake EasyEdit); and in none of them afterwards. A toy baseline
is a bench row that ``unlearn`` refuses, by the entry's ``baseline`` flag. No test here lists the shipped names:
they are read from the registry.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, Iterator, List

import pytest
import torch
import yaml

from tiny_models import REPO_ROOT, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.engine.hparams import BaseHyperParams, EditHyperParams, HParamsError
from zerounlearn_editor.engine.pipeline import LayerProblem, apply_edit_method
from zerounlearn_editor.methods import registry
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

TOY = "ToyScale"
TOY_BASELINE = "ToyAscent"
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
    with registry.registered(registry.MethodEntry(TOY, ToyHyperParams, apply_toy_to_model)) as entry:
        yield entry
    assert TOY not in registry.method_names(baselines=True)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _toy_yaml(path: Path, root: Path, **changes: Any) -> Path:
    changes.setdefault("alg_name", TOY)
    config = tiny_hparams_dict(root / "stats", write_corpus(root / "corpus.jsonl"), **changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_every_shipped_yaml_names_a_registered_method_of_its_folder():
    """Each entry's class carries its name, and every YAML under ``hparams/<folder>/`` names the entry of that
    folder: an editing method's loads through ``load_method`` into its class, a baseline's is refused by the flag."""
    entries = registry.registered_methods(baselines=True)
    assert entries and any(e.baseline for e in entries) and any(not e.baseline for e in entries)
    for entry in entries:
        assert entry.hparams_class.ALG_NAME == entry.name
        files = sorted((REPO_ROOT / "hparams" / entry.folder).glob("*.yaml"))
        assert files, f"no shipped YAML for {entry.name}"
        for path in files:
            assert yaml.safe_load(path.read_text(encoding="utf-8"))["alg_name"] == entry.name, path
        if entry.baseline:
            with pytest.raises(registry.BaselineMethodError, match=rf"{files[0].name}: key 'alg_name': {entry.name} "
                               rf"is a comparison baseline, run by `zerounlearn bench --methods {entry.name}` only"):
                registry.load_method(files[0])
        else:
            hp, apply = registry.load_method(files[0])
            assert type(hp) is entry.hparams_class and apply is entry.apply


def test_unknown_name_lists_the_registered_ones(tmp_path):
    names = ", ".join(registry.method_names(baselines=True))
    with pytest.raises(registry.UnknownMethodError, match=rf"unknown method 'Nope'; registered: {names}$"):
        registry.get_method("Nope")
    path = tmp_path / "x.yaml"
    path.write_text("alg_name: ZeroUnlern\nmodel_name: tiny\n", encoding="utf-8")
    with pytest.raises(HParamsError, match=rf"x.yaml: key 'alg_name': unknown method 'ZeroUnlern'; registered: "
                       rf"{names}"):
        registry.load_method(path)


def test_registration_checks_the_entry():
    with pytest.raises(ValueError, match="already registered"):
        registry.register_method(registry.get_method("ZeroUnlearn"))
    with pytest.raises(ValueError, match="ALG_NAME 'ToyScale'"):
        registry.register_method(registry.MethodEntry("Other", ToyHyperParams, apply_toy_to_model))
    with pytest.raises(TypeError, match="EditHyperParams"):
        registry.register_method(registry.MethodEntry(TOY, dict, apply_toy_to_model))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="BaseHyperParams"):
        registry.register_method(registry.MethodEntry(TOY, dict, apply_toy_to_model, baseline=True))  # type: ignore
    assert TOY not in registry.method_names(baselines=True)


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
    from zerounlearn_editor.harness import BenchConfig, default_registry, run_bench

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


def _option(command: str, dest: str) -> argparse.Action:
    """The ``zerounlearn <command>`` parser's action of ``dest`` (its help, choices and default)."""
    from zerounlearn_editor.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return next(a for a in sub.choices[command]._actions if a.dest == dest)  # noqa: SLF001


def _where_named(name: str) -> Dict[str, bool]:
    """Per consumer of the registry: whether it offers the method ``name``."""
    from zerounlearn_editor.cli.hparams_doc import field_help, key_table
    from zerounlearn_editor.harness import default_registry, speed_bench
    from zerounlearn_editor.harness.bench_config import default_methods, default_round_methods
    from zerounlearn_editor.integrations.easyedit import method_functions

    alg_row = next(line for line in key_table().splitlines() if line.startswith("| `alg_name` |"))
    try:
        registry.get_method("Nope")
    except registry.UnknownMethodError as exc:
        unknown = str(exc)
    return {
        "bench rows": name in default_registry(),
        "bench default --methods": name in default_methods(),
        "bench --rounds default": name in default_round_methods(),
        "bench --methods help": name in _option("bench", "methods").help,
        "bench --rounds help": f"{name}," in _option("bench", "rounds").help or f"{name})" in _option(
            "bench", "rounds").help,
        "audit --methods help": name in _option("audit", "methods").help,
        "audit --methods default": name in _option("audit", "methods").default.split(","),
        "pca --methods default": name in _option("pca", "methods").default.split(","),
        "speed bench default methods": name in speed_bench.SpeedConfig().methods,
        "bench-speed --methods default": name in _option("bench-speed", "methods").default.split(","),
        "init-hparams --method choices": name in _option("init-hparams", "method").choices,
        "unlearn --hparams help": name in _option("unlearn", "hparams").help,
        "alg_name help": f"`{name}`" in field_help()["alg_name"],
        "README key table": f"`{name}`" in alg_row,
        "unknown-name error": name in unknown.split("registered: ", 1)[1].split(", "),
        "EasyEdit ALG_DICT entries": name in method_functions(),
    }


def test_a_method_registered_with_one_call_reaches_every_consumer_and_leaves_with_it():
    assert not any(_where_named(TOY).values())
    with registry.registered(registry.MethodEntry(TOY, ToyHyperParams, apply_toy_to_model)):
        where = _where_named(TOY)
        assert all(where.values()), f"the toy is missing from {[k for k, v in where.items() if not v]}"
    assert not any(_where_named(TOY).values()), "unregistered: gone from every consumer"
    assert TOY not in registry.method_names(baselines=True)


def test_toy_method_runs_in_the_speed_bench_init_hparams_and_key_table(toy, tmp_path):
    from zerounlearn_editor.cli import build_parser
    from zerounlearn_editor.cli.hparams_doc import key_table
    from zerounlearn_editor.harness import speed_bench

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


@dataclass
class ToyBaselineHyperParams(BaseHyperParams):
    """A toy comparison baseline (the host keys only)."""

    ALG_NAME: ClassVar[str] = TOY_BASELINE


def test_a_baseline_is_a_bench_row_only_and_unlearn_refuses_it_by_the_flag(tmp_path):
    from zerounlearn_editor.applications.unlearn import UnlearnSettings, run_unlearn
    from zerounlearn_editor.harness.method_specs import HParamsLookup

    entry = registry.MethodEntry(TOY_BASELINE, ToyBaselineHyperParams, apply_toy_to_model,
                                 row_variants={"-all": "-all"}, baseline=True)
    with registry.registered(entry):
        where = _where_named(TOY_BASELINE)
        bench_side = ("bench rows", "bench default --methods", "bench --methods help", "audit --methods help",
                      "unknown-name error")
        assert all(where[k] for k in bench_side) and not any(v for k, v in where.items() if k not in bench_side)
        from zerounlearn_editor.harness import default_registry

        assert f"{TOY_BASELINE}-all" in default_registry()
        path = tmp_path / "hparams" / TOY_BASELINE / "tiny.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump({"alg_name": TOY_BASELINE, "model_name": "tiny"}), encoding="utf-8")
        (path.parent / "tiny-all.yaml").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        main = _toy_yaml(tmp_path / "hparams" / "main" / "tiny.yaml", tmp_path, alg_name=registry.method_names()[0])
        lookup = HParamsLookup(main, registry.load_method(main)[0])
        assert default_registry()[f"{TOY_BASELINE}-all"].describe(lookup)["hparams"]["file"] == str(
            path.parent / "tiny-all.yaml")
        facts = tmp_path / "facts.json"
        facts.write_text(json.dumps([{"prompt": "p", "subject": "s"}]), encoding="utf-8")
        with pytest.raises(registry.BaselineMethodError, match=rf"tiny.yaml: key 'alg_name': {TOY_BASELINE} is a "
                           "comparison baseline, run by `zerounlearn bench --methods .*` only; unlearn runs the "
                           "editing methods: " + ", ".join(registry.method_names())):
            run_unlearn(path, facts, tmp_path / "out", settings=UnlearnSettings(save="none", progress=False))
    assert not any(_where_named(TOY_BASELINE).values())


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
        registry.unregister_method(TOY)
        assert register_with_easyedit()
        assert TOY not in alg_dict and not batch.is_batchable_method(TOY), "unregistered: gone from EasyEdit too"
        assert set(registry.method_names()) <= set(alg_dict) and "MEMIT" in alg_dict
        baselines = set(registry.method_names(baselines=True)) - set(registry.method_names())
        assert baselines and not baselines & set(alg_dict), "the baselines are bench rows, not EasyEdit methods"
    finally:
        for name in [n for n in sys.modules if n == "easyeditor" or n.startswith("easyeditor.")]:
            del sys.modules[name]
        sys.modules.update(saved)
        importlib.invalidate_caches()


def test_row_variants_are_bench_rows_and_only_the_retain_row_gets_the_retain_set(tmp_path):
    """A registered method's ``row_variants`` are its bench rows (row suffix -> YAML stem suffix), only
    :data:`~zerounlearn_editor.methods.registry.RETAIN_ROW` is edited with the retain set, a row mapped to ``None``
    is bench-only (its file only from ``--method-hparams``), and an undeclared row is an error naming the rows."""
    from zerounlearn_editor.harness import BenchConfigError, default_registry
    from zerounlearn_editor.harness.method_specs import HParamsLookup, MethodContext, edit_method_spec

    retain_row = registry.RETAIN_ROW
    entry = registry.MethodEntry(TOY, ToyHyperParams, apply_toy_to_model,
                                 row_variants={retain_row: "-keep", "+Q": None})
    with registry.registered(entry):
        assert {TOY, TOY + retain_row, f"{TOY}+Q"} <= set(default_registry())
        main = _toy_yaml(tmp_path / "hparams" / TOY / "tiny.yaml", tmp_path)
        (main.parent / "tiny-keep.yaml").write_text(main.read_text(encoding="utf-8"), encoding="utf-8")
        other = main.parent / "elsewhere.yaml"
        other.write_text(main.read_text(encoding="utf-8"), encoding="utf-8")
        hp = ToyHyperParams.from_hparams(main)
        lookup = HParamsLookup(main, hp)
        context = MethodContext(lookup, model=None, tok=None, work_dir=tmp_path, neutral_target="")
        for row, file, retain in ((TOY, main, False), (TOY + retain_row, main.parent / "tiny-keep.yaml", True)):
            spec = edit_method_spec(row)
            assert spec.describe(lookup)["hparams"]["file"] == str(file)
            assert spec.prepare(context).uses_retain is retain, row
        with pytest.raises(BenchConfigError, match=rf"'{TOY}\+Q' is a bench-only row with no shipped YAML; "
                           rf"pass --method-hparams {TOY}\+Q=PATH"):
            edit_method_spec(f"{TOY}+Q").describe(lookup)
        given = HParamsLookup(main, hp, {f"{TOY}+Q": str(other)})
        assert edit_method_spec(f"{TOY}+Q").describe(given)["hparams"]["file"] == str(other)
        assert not edit_method_spec(f"{TOY}+Q").prepare(MethodContext(given, None, None, tmp_path, "")).uses_retain
        with pytest.raises(registry.UnknownMethodError, match=rf"{TOY} has no \+X row \(its rows: {TOY}\+R, "
                           rf"{TOY}\+Q\)"):
            edit_method_spec(f"{TOY}+X")
    with registry.registered(registry.MethodEntry(TOY, ToyHyperParams, apply_toy_to_model)):
        with pytest.raises(registry.UnknownMethodError, match=rf"{TOY} has no \+R row \(its rows: none\)"):
            edit_method_spec(f"{TOY}+R")


def test_every_row_with_a_yaml_suffix_has_a_shipped_yaml():
    """A registered row that names a YAML stem suffix finds one under its folder for some model; a row whose file
    does not ship is declared bench-only (``None``) instead of pretending to one."""
    for entry in registry.registered_methods(baselines=True):
        for suffix, variant in entry.row_variants.items():
            if variant is not None:
                assert list((REPO_ROOT / "hparams" / entry.folder).glob(f"*{variant}.yaml")), entry.name + suffix
