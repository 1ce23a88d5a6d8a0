"""benchmarks/run_easyedit_eval.py: hparams class lookup, KnowEdit inputs, unlearn/edit modes, summary.

The plumbing is tested against fake EasyEdit objects everywhere; one test runs the real
EasyEdit (``@pytest.mark.easyedit``) and is skipped when ``easyeditor`` is not importable.
"""
from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

from tiny_models import tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
)
from zerounlearn_editor.easyedit import easyedit_available
from zerounlearn_editor.easyedit_eval import FORGET_KEY, find_hparams_class, knowedit_inputs, main, unlearning_summary


def _module(monkeypatch, name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        if callable(value) and hasattr(value, "__module__"):
            try:
                value.__module__ = name
            except (AttributeError, TypeError):
                pass
        if isinstance(value, type):
            for member in vars(value).values():
                if callable(member):
                    member.__module__ = name
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


class _HP:
    @classmethod
    def from_hparams(cls, path):
        return cls()


def test_hparams_class_is_looked_up_not_listed(monkeypatch):
    ROMEHyperParams = type("ROMEHyperParams", (_HP,), {})
    MENDHyperParams = type("MENDHyperParams", (_HP,), {})
    MENDMultimodalHparams = type("MENDMultimodalHparams", (_HP,), {})
    SERACHparams = type("SERACHparams", (_HP,), {})

    def apply_rome_to_model(*args, **kwargs):
        return None

    class MendRewriteExecutor:
        def apply_to_model(self, *args, **kwargs):
            return None

    def apply_serac(*args, **kwargs):
        return None

    _module(monkeypatch, "fakeee")
    _module(monkeypatch, "fakeee.rome", ROMEHyperParams=ROMEHyperParams)
    _module(monkeypatch, "fakeee.rome.rome_main", ROMEHyperParams=ROMEHyperParams, apply_rome_to_model=apply_rome_to_model)
    _module(monkeypatch, "fakeee.mend", MENDHyperParams=MENDHyperParams, MENDMultimodalHparams=MENDMultimodalHparams)
    _module(monkeypatch, "fakeee.mend.mend_main", MendRewriteExecutor=MendRewriteExecutor)
    _module(monkeypatch, "fakeee.serac", SERACHparams=SERACHparams, OtherHyperParams=ROMEHyperParams)
    _module(monkeypatch, "fakeee.serac.main", apply_serac=apply_serac)
    alg_dict = {
        "ROME": apply_rome_to_model,
        "MEND": MendRewriteExecutor().apply_to_model,
        "SERAC": apply_serac,
        "ZeroUnlearn": apply_zerounlearn_to_model,
        "ZeroUnlearn-GD": apply_zerounlearn_gd_to_model,
        "R-ROME": apply_rome_to_model,
    }
    assert find_hparams_class("ROME", alg_dict) is ROMEHyperParams
    assert find_hparams_class("MEND", alg_dict) is MENDHyperParams  # matched by name among two
    assert find_hparams_class("SERAC", alg_dict) is SERACHparams
    assert find_hparams_class("ZeroUnlearn", alg_dict) is ZeroUnlearnHyperParams
    assert find_hparams_class("ZeroUnlearn-GD", alg_dict) is ZeroUnlearnGDHyperParams
    assert find_hparams_class("R-ROME", alg_dict) is ROMEHyperParams  # the only candidate
    with pytest.raises(ValueError, match=r"'FOO' is not in EasyEdit's ALG_DICT; known: MEND, R-ROME, ROME"):
        find_hparams_class("FOO", alg_dict)
    _module(monkeypatch, "fakeee.two", AHyperParams=type("AHyperParams", (_HP,), {}), BHyperParams=type("BHyperParams", (_HP,), {}))
    _module(monkeypatch, "fakeee.two.main", apply_two=apply_serac)
    with pytest.raises(ValueError, match=r"candidates \['AHyperParams', 'BHyperParams'\]"):
        find_hparams_class("TWO", {"TWO": sys.modules["fakeee.two.main"].apply_two})


def _record(i: int, truth: Any = "paris") -> Dict[str, Any]:
    return {
        "subject": f"s{i}",
        "prompt": f"the capital of s{i} is",
        "target_new": "rome",
        "ground_truth": truth,
        "portability_r": [{"prompt": "q1", "ground_truth": [["a1", "x"]]}, {"prompt": "q2", "ground_truth": [" "]}],
        "portability_s": None,
        "portability_l": [{"prompt": "q3", "ground_truth": "a3"}],
        "locality_rs": [{"prompt": "l1", "ground_truth": ["b1"]}],
        "locality_f": None,
    }


def test_knowedit_inputs_align_with_requests():
    args = knowedit_inputs([_record(0), _record(1, truth=None), _record(2, truth=["berlin"])], "counterfact")
    assert args["prompts"][1] == "the capital of s1 is" and args["subject"] == ["s0", "s1", "s2"]
    reasoning = args["portability_inputs"]["reasoning"]
    assert reasoning["prompt"][0] == ["q1"] and reasoning["ground_truth"][0] == ["a1"]  # nested unwrapped, empty dropped
    assert args["portability_inputs"]["Subject_Aliasing"]["prompt"] == [None, None, None]
    assert args["locality_inputs"]["Relation_Specificity"]["ground_truth"][2] == ["b1"]
    assert args["locality_inputs"]["Forgetfulness"]["prompt"] == [None, None, None]
    forget = args["portability_inputs"][FORGET_KEY]
    assert forget == {"prompt": ["the capital of s0 is", None, "the capital of s2 is"], "ground_truth": ["paris", None, "berlin"]}
    wikibio = knowedit_inputs([_record(0)], "wikibio")
    assert list(wikibio["locality_inputs"]) == ["Relation_Specificity"] and list(wikibio["portability_inputs"]) == [FORGET_KEY]
    with pytest.raises(ValueError, match="--datatype must be"):
        knowedit_inputs([_record(0)], None)


class _FakeEditor:
    calls: List[Dict[str, Any]] = []

    def __init__(self, hparams):
        self.hparams = hparams
        self.tok = types.SimpleNamespace(eos_token="<eos>")
        self.model_name = hparams.model_name

    @classmethod
    def from_hparams(cls, hparams):
        return cls(hparams)

    def edit(self, **kwargs):
        _FakeEditor.calls.append(kwargs)
        metrics = []
        for i, prompt in enumerate(kwargs["prompts"]):
            truth = kwargs["portability_inputs"][FORGET_KEY]["prompt"][i]
            port = {f"{FORGET_KEY}_acc": [1.0, 0.5]} if truth else {}
            metrics.append({
                "pre": {"rewrite_acc": [0.0], "portability": dict(port, reasoning_acc=[1.0]), "locality": {}},
                "post": {"rewrite_acc": [1.0], "portability": {f"{FORGET_KEY}_acc": [0.0]} if truth else {},
                         "locality": {"Relation_Specificity_acc": [1.0, 0.0]}, "fluency": {"ngram_entropy": 5.0}},
            })
        return metrics, None, None


def _fake_easyedit(records):
    return {
        "alg_dict": {"ZeroUnlearn": apply_zerounlearn_to_model, "ZeroUnlearn-GD": apply_zerounlearn_gd_to_model},
        "BaseEditor": _FakeEditor,
        "KnowEditDataset": lambda path, size=None: records[:size] if size else records,
    }


@pytest.fixture()
def yaml_file(tmp_path):
    config = tiny_hparams_dict(tmp_path / "stats", tmp_path / "corpus.jsonl", model_name="some/llama-like-model")
    path = tmp_path / "zu.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_main_unlearns_by_default_and_edits_with_keep(tmp_path, yaml_file, capsys):
    records = [_record(0), _record(1), _record(2, truth=None)]
    _FakeEditor.calls.clear()
    argv = ["--editing_method", "ZeroUnlearn", "--hparams_dir", str(yaml_file), "--data_dir", "unused.json",
            "--datatype", "counterfact", "--ds_size", "3", "--metrics_save_dir", str(tmp_path / "out")]
    summary = main(argv, easyedit=_fake_easyedit(records))
    call = _FakeEditor.calls[-1]
    assert call["target_new"] == ["<eos>"] * 3 and call["keep_original_weight"] is True
    assert summary["mode"] == "unlearn" and summary["target_new"] == "<eos>"
    assert summary["forget_ground_truth_acc"] == {"pre": pytest.approx(0.75), "post": 0.0}
    assert summary["locality"]["Relation_Specificity_acc"]["post"] == pytest.approx(0.5)
    assert summary["portability"]["reasoning_acc"]["pre"] == 1.0 and FORGET_KEY + "_acc" not in summary["portability"]
    assert summary["fluency_ngram_entropy_post"] == 5.0
    assert (tmp_path / "out" / "ZeroUnlearn_counterfact_llama-like-model_results.json").is_file()
    stored = json.loads((tmp_path / "out" / "ZeroUnlearn_counterfact_llama-like-model_unlearning_summary.json").read_text())
    assert stored["mode"] == "unlearn"
    assert "UNLEARN (ZeroUnlearn, 3 cases, target_new: '<eos>')" in capsys.readouterr().out

    summary = main(argv[:-2] + ["--metrics_save_dir", str(tmp_path / "keep"), "--target-new", "keep"],
                   easyedit=_fake_easyedit(records))
    assert _FakeEditor.calls[-1]["target_new"] == ["rome"] * 3 and summary["mode"] == "edit"


def test_main_rejects_a_yaml_of_another_method(tmp_path, yaml_file):
    with pytest.raises(SystemExit, match="alg_name is 'ZeroUnlearn', but --editing_method is 'ZeroUnlearn-GD'"):
        main(["--editing_method", "ZeroUnlearn-GD", "--hparams_dir", str(yaml_file), "--data_dir", "x",
              "--datatype", "zsre", "--metrics_save_dir", str(tmp_path)], easyedit=_fake_easyedit([_record(0)]))


def test_unlearning_summary_without_values():
    summary = unlearning_summary([{"pre": {}, "post": {}}], {"mode": "unlearn"})
    assert summary["forget_ground_truth_acc"] == {"pre": None, "post": None} and summary["cases"] == 1


def _real_easyedit_importable() -> bool:
    if not easyedit_available():
        return False
    try:
        importlib.import_module("easyeditor.editors.editor")
        importlib.import_module("easyeditor.dataset.knowedit")
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


@pytest.mark.easyedit
def test_real_easyedit_unlearns_a_knowedit_file(tmp_path, monkeypatch):
    if not _real_easyedit_importable():
        pytest.skip("EasyEdit is not importable: set EASYEDIT_PATH to an EasyEdit source tree in an environment "
                    "with EasyEdit's requirements")
    monkeypatch.chdir(tmp_path)  # EasyEdit writes ./logs
    tok = tiny_tokenizer()
    model_dir = tmp_path / "tiny-llama"
    tiny_llama(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    # a word as neutral target: EasyEdit's rewrite accuracy cannot slice a lone special token of the tiny tokenizer
    config = tiny_hparams_dict(tmp_path / "stats", write_corpus(tmp_path / "corpus.jsonl"), model_name=str(model_dir),
                               neutral_target="the")
    (tmp_path / "zu.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    data = [
        {"subject": s, "prompt": f"the capital of {s} is", "target_new": "rome", "ground_truth": a,
         "portability": {}, "locality": {"Relation_Specificity": [{"prompt": "the old city in egypt is", "ground_truth": ["cairo"]}]}}
        for s, a in (("france", "paris"), ("germany", "berlin"))
    ]
    (tmp_path / "data.json").write_text(json.dumps(data), encoding="utf-8")
    summary = main(["--editing_method", "ZeroUnlearn", "--hparams_dir", str(tmp_path / "zu.yaml"), "--data_dir",
                    str(tmp_path / "data.json"), "--datatype", "counterfact", "--metrics_save_dir", str(tmp_path / "out"),
                    "--no-test-generation"])
    assert summary["mode"] == "unlearn" and summary["target_new"] == "the" and summary["cases"] == 2
    assert summary["forget_ground_truth_acc"]["pre"] is not None and summary["forget_ground_truth_acc"]["post"] is not None
