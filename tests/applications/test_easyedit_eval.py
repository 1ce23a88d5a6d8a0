"""benchmarks/run_easyedit_eval.py: hparams class lookup, KnowEdit inputs, unlearn/edit modes, summary.

The plumbing is tested against fake EasyEdit objects everywhere; one test runs the real
EasyEdit (``@pytest.mark.easyedit``) and is skipped when ``easyeditor`` is not importable.
"""
from __future__ import annotations

import importlib
import json
import re
import sys
import types
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch
import yaml

from tiny_models import FIXTURES, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
)
from zerounlearn_editor.applications.easyedit_eval import (
    FORGET_KEY,
    find_hparams_class,
    flat_inputs,
    knowedit_inputs,
    main,
    read_edit_data,
    unlearning_summary,
)
from zerounlearn_editor.integrations.easyedit import easyedit_available
from zerounlearn_editor.support.resources import shared_file


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
    _module(
        monkeypatch, "fakeee.rome.rome_main", ROMEHyperParams=ROMEHyperParams, apply_rome_to_model=apply_rome_to_model
    )
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
    _module(
        monkeypatch,
        "fakeee.two",
        AHyperParams=type("AHyperParams", (_HP,), {}),
        BHyperParams=type("BHyperParams", (_HP,), {}),
    )
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
    assert reasoning["prompt"][0] == ["q1"] and reasoning["ground_truth"][0] == [
        "a1"
    ]  # nested unwrapped, empty dropped
    assert args["portability_inputs"]["Subject_Aliasing"]["prompt"] == [None, None, None]
    assert args["locality_inputs"]["Relation_Specificity"]["ground_truth"][2] == ["b1"]
    assert args["locality_inputs"]["Forgetfulness"]["prompt"] == [None, None, None]
    forget = args["portability_inputs"][FORGET_KEY]
    assert forget == {
        "prompt": ["the capital of s0 is", None, "the capital of s2 is"],
        "ground_truth": ["paris", None, "berlin"],
    }
    wikibio = knowedit_inputs([_record(0)], "wikibio")
    assert list(wikibio["locality_inputs"]) == ["Relation_Specificity"] and list(wikibio["portability_inputs"]) == [
        FORGET_KEY
    ]
    with pytest.raises(ValueError, match="--datatype must be"):
        knowedit_inputs([_record(0)], None)


class _FakeEditor:
    """EasyEdit's ``BaseEditor`` as the script uses it; the model is read from ``hparams.model_name`` when that is a
    saved folder (as EasyEdit loads it), else a fixed small module."""

    calls: List[Dict[str, Any]] = []
    loads: List[str] = []

    def __init__(self, hparams):
        self.hparams = hparams
        self.tok = types.SimpleNamespace(eos_token="<eos>")
        self.model_name = hparams.model_name
        _FakeEditor.loads.append(hparams.model_name)
        if Path(hparams.model_name).is_dir():
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(hparams.model_name)
        else:
            torch.manual_seed(0)
            self.model = torch.nn.Linear(4, 4)

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


def _knowedit_file(path: Path, n: int) -> Path:
    """A KnowEdit-format file (the fake KnowEditDataset hands out ``_record``s, this file is format-checked)."""
    rows = [{"subject": f"s{i}", "prompt": f"the capital of s{i} is", "target_new": "rome", "ground_truth": "paris",
             "locality": {}, "portability": {}} for i in range(n)]
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def test_main_unlearns_by_default_and_edits_with_keep(tmp_path, yaml_file, capsys):
    records = [_record(0), _record(1), _record(2, truth=None)]
    _FakeEditor.calls.clear()
    data = _knowedit_file(tmp_path / "knowedit.json", 3)
    argv = ["--editing_method", "ZeroUnlearn", "--hparams_dir", str(yaml_file), "--data_dir", str(data),
            "--datatype", "counterfact", "--ds_size", "3", "--metrics_save_dir", str(tmp_path / "out")]
    summary = main(argv, easyedit=_fake_easyedit(records))
    call = _FakeEditor.calls[-1]
    assert call["target_new"] == ["<eos>"] * 3 and call["keep_original_weight"] is True
    assert summary["mode"] == "unlearn" and summary["target_new"] == "<eos>"
    assert summary["forget_ground_truth_acc"] == {"pre": pytest.approx(0.75), "post": 0.0}
    assert summary["locality"]["Relation_Specificity_acc"] == {
        "pre": 1.0,
        "post": pytest.approx(0.5),
    }  # pre: by definition
    assert summary["portability"]["reasoning_acc"]["pre"] == 1.0 and FORGET_KEY + "_acc" not in summary["portability"]
    assert summary["fluency_ngram_entropy"] == {"pre": None, "post": 5.0}
    assert (tmp_path / "out" / "ZeroUnlearn_counterfact_llama-like-model_results.json").is_file()
    stored = json.loads(
        (tmp_path / "out" / "ZeroUnlearn_counterfact_llama-like-model_unlearning_summary.json").read_text()
    )
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
    assert summary["locality"] == {} and summary["rephrase_acc"] == {"pre": None, "post": None}


CF_FIELDS = (
    "prompt",
    "subject",
    "target_new",
    "ground_truth",
    "rephrase_prompt",
    "locality_prompt",
    "locality_ground_truth",
)


def _cf(i: int, truth: str = "paris") -> Dict[str, Any]:
    return {
        "case_id": i,
        "prompt": f"the capital of s{i} is",
        "subject": f"s{i}",
        "target_new": "rome",
        "ground_truth": truth,
        "rephrase_prompt": f"s{i} has its capital in",
        "locality_prompt": "the capital of egypt is",
        "locality_ground_truth": "cairo",
    }


def _zsre(i: int) -> Dict[str, Any]:
    return {
        "subject": f"s{i}",
        "src": f"What is the capital of s{i}?",
        "pred": "x",
        "rephrase": f"Capital city of s{i}?",
        "alt": "rome",
        "answers": ["paris"],
        "loc": "nq question: who wrote hamlet",
        "loc_ans": "shakespeare",
        "cond": "",
        "portability": {"New Question": f"Which river flows through the capital of s{i}?", "New Answer": "seine"},
    }


def _write(path: Path, rows: Any) -> Path:
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def test_read_edit_data_tells_the_three_formats_apart(tmp_path):
    cf = read_edit_data(str(_write(tmp_path / "cf.json", [_cf(0), _cf(1), _cf(2)])), size=2)
    assert cf.format == "counterfact" and len(cf.records) == 2 and len(cf.digest) == 64
    assert read_edit_data(str(_write(tmp_path / "zsre.json", [_zsre(0)]))).format == "zsre"
    knowedit = read_edit_data(str(_knowedit_file(tmp_path / "ke.json", 2)))
    assert knowedit.format == "knowedit" and knowedit.records is None


def test_read_edit_data_names_what_it_cannot_read(tmp_path):
    broken = _cf(1)
    del broken["locality_ground_truth"], broken["rephrase_prompt"]
    with pytest.raises(
        SystemExit,
        match=r"record 1 \(counterfact format\) lacks field\(s\) \['rephrase_prompt', 'locality_ground_truth'\]",
    ):
        read_edit_data(str(_write(tmp_path / "cf.json", [_cf(0), broken])))
    with pytest.raises(SystemExit, match=r"cannot tell the format of record 0 \(fields \['answer', 'question'\]\)"):
        read_edit_data(str(_write(tmp_path / "other.json", [{"question": "q", "answer": "a"}])))
    with pytest.raises(SystemExit, match="expected a non-empty JSON list"):
        read_edit_data(str(_write(tmp_path / "empty.json", [])))
    with pytest.raises(SystemExit, match="no such file"):
        read_edit_data(str(tmp_path / "missing.json"))
    with pytest.raises(SystemExit, match="record 0 field ground_truth is empty"):
        flat_inputs(read_edit_data(str(_write(tmp_path / "cf2.json", [_cf(0, truth=" ")]))))


def test_flat_inputs_of_counterfact_and_zsre(tmp_path):
    args = flat_inputs(read_edit_data(str(_write(tmp_path / "cf.json", [_cf(0), _cf(1)]))))
    assert args["prompts"] == ["the capital of s0 is", "the capital of s1 is"] and args["target_new"] == [
        "rome",
        "rome",
    ]
    assert args["ground_truth"] == ["paris", "paris"] and args["rephrase_prompts"][1] == "s1 has its capital in"
    assert args["locality_inputs"] == {
        "neighborhood": {"prompt": ["the capital of egypt is"] * 2, "ground_truth": ["cairo"] * 2}
    }
    assert args["portability_inputs"][FORGET_KEY] == {"prompt": args["prompts"], "ground_truth": ["paris", "paris"]}
    assert args["portability_inputs"]["neighborhood_Ground_Truth"]["ground_truth"] == ["cairo", "cairo"]
    assert "New_Question" not in args["portability_inputs"]

    zsre = flat_inputs(read_edit_data(str(_write(tmp_path / "zsre.json", [_zsre(0)]))))
    assert zsre["prompts"] == ["What is the capital of s0?"] and zsre["ground_truth"] == ["paris"]
    assert zsre["target_new"] == ["rome"] and zsre["rephrase_prompts"] == ["Capital city of s0?"]
    assert zsre["locality_inputs"]["neighborhood"] == {
        "prompt": ["nq question: who wrote hamlet"],
        "ground_truth": ["shakespeare"],
    }
    assert zsre["portability_inputs"]["New_Question"]["ground_truth"] == ["seine"]


@pytest.mark.parametrize("name,fmt", [("counterfact/counterfact_easyedit_val_1919.json", "counterfact"),
                                      ("zsre/zsre_mend_eval_1037.json", "zsre"),
                                      ("zsre/knowedit_zsre_test_1301.json", "knowedit")])
def test_the_shared_benchmark_files_are_read(name, fmt):
    try:
        path = shared_file(name)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    data = read_edit_data(str(path), size=5)
    assert data.format == fmt
    if fmt != "knowedit":
        args = flat_inputs(data)
        assert len(args["prompts"]) == 5 and all(s in p for s, p in zip(args["subject"], args["prompts"]))


def test_pre_edit_cache_is_keyed_by_the_data_content(tmp_path, yaml_file):
    """Two data files of the same length get their own pre-edit metrics; the same file reuses its own."""
    out = tmp_path / "out"
    first = _write(tmp_path / "a.json", [_cf(0), _cf(1)])
    second = _write(tmp_path / "b.json", [_cf(2), _cf(3)])

    def run(path):
        _FakeEditor.calls.clear()
        summary = main(["--editing_method", "ZeroUnlearn", "--hparams_dir", str(yaml_file), "--data_dir", str(path),
                        "--metrics_save_dir", str(out)], easyedit=_fake_easyedit([]))
        return summary, _FakeEditor.calls[-1]

    summary_a, call = run(first)
    assert (
        call["pre_edit"] is None
        and summary_a["datatype"] == "counterfact"
        and summary_a["data_format"] == "counterfact"
    )
    assert call["rephrase_prompts"] == ["s0 has its capital in", "s1 has its capital in"]
    stored = json.loads(Path(summary_a["pre_edit_file"]).read_text())
    assert len(stored) == 2 and stored[0]["pre"]["rewrite_acc"] == [0.0]
    summary_b, call = run(second)
    assert call["pre_edit"] is None, "another file of the same length must not reuse the first one's pre-edit metrics"
    assert summary_b["pre_edit_file"] != summary_a["pre_edit_file"]
    summary_again, call = run(first)
    assert call["pre_edit"] == stored and summary_again["pre_edit_file"] == summary_a["pre_edit_file"]
    with pytest.raises(SystemExit, match="is in EasyEdit's counterfact format, but --datatype is 'zsre'"):
        main(["--editing_method", "ZeroUnlearn", "--hparams_dir", str(yaml_file), "--data_dir", str(first),
              "--datatype", "zsre", "--metrics_save_dir", str(out)], easyedit=_fake_easyedit([]))


def test_pre_edit_cache_is_keyed_by_the_model(tmp_path):
    """Issue 36.3: another model saved in the folder the YAML names must not reuse the first one's pre-edit metrics."""
    tok = tiny_tokenizer()
    model_dir = tmp_path / "model"
    config = tiny_hparams_dict(tmp_path / "stats", tmp_path / "corpus.jsonl", model_name=str(model_dir))
    (tmp_path / "zu.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    data = _write(tmp_path / "cf.json", [_cf(0), _cf(1)])

    def run(seed):
        tiny_llama(tok, seed=seed).save_pretrained(model_dir)  # replaces the weights in the same folder
        _FakeEditor.calls.clear()
        summary = main(["--editing_method", "ZeroUnlearn", "--hparams_dir", str(tmp_path / "zu.yaml"), "--data_dir",
                        str(data), "--metrics_save_dir", str(tmp_path / "out")], easyedit=_fake_easyedit([]))
        return summary["pre_edit_file"], _FakeEditor.calls[-1]["pre_edit"]

    first, pre_edit = run(seed=0)
    assert pre_edit is None
    second, pre_edit = run(seed=1)
    assert pre_edit is None, "another model in the same folder reused the first model's pre-edit metrics"
    assert second != first
    again, pre_edit = run(seed=0)
    assert again == first and pre_edit == json.loads(Path(first).read_text())


def _yaml(tmp_path: Path, name: str = "zu.yaml", **changes) -> Path:
    config = tiny_hparams_dict(tmp_path / "stats", tmp_path / "corpus.jsonl", model_name="some/llama-like-model")
    config.update(changes)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _bad_case(case: str, tmp_path: Path) -> List[str]:
    """The arguments of one bad-input case of issue 36.11 (everything else valid)."""
    args = {
        "--editing_method": "ZeroUnlearn",
        "--hparams_dir": str(_yaml(tmp_path)),
        "--data_dir": str(_write(tmp_path / "cf.json", [_cf(0), _cf(1)])),
        "--metrics_save_dir": str(tmp_path / "out"),
    }
    if case == "metrics_save_dir is a file":
        args["--metrics_save_dir"] = str(_write(tmp_path / "taken", []))
    elif case == "pre_file is a folder":
        (tmp_path / "pre").mkdir()
        args["--pre_file"] = str(tmp_path / "pre")
    elif case == "pre_file is not JSON":
        args["--pre_file"] = str(tmp_path / "pre.json")
        (tmp_path / "pre.json").write_text("{not json", encoding="utf-8")
    elif case == "unknown method":
        args["--editing_method"] = "NOPE"
        args["--hparams_dir"] = str(_yaml(tmp_path, "nope.yaml", alg_name="NOPE"))
    elif case == "missing hparams":
        args["--hparams_dir"] = str(tmp_path / "missing.yaml")
    elif case == "bad hparams":
        args["--hparams_dir"] = str(_yaml(tmp_path, "bad.yaml", v_lr="fast"))
    elif case == "unknown hparams key":
        args["--hparams_dir"] = str(_yaml(tmp_path, "extra.yaml", not_a_key=1))
    elif case == "KnowEdit without --datatype":
        args["--data_dir"] = str(_knowedit_file(tmp_path / "ke.json", 2))
    elif case == "subject not in prompt":
        args["--data_dir"] = str(_write(tmp_path / "cf.json", [_cf(0), dict(_cf(1), subject="Atlantis")]))
    elif case == "deep YAML without few-shot facts":
        args["--hparams_dir"] = str(_yaml(tmp_path, "deep.yaml", fewshot_contexts=2))
        args["--data_dir"] = str(
            _write(tmp_path / "cf.json", [_cf(0), dict(_cf(1), subject="a", prompt="the capital of a is")])
        )
    elif case == "KnowEdit subject not in prompt":
        rows = json.loads(_knowedit_file(tmp_path / "ke.json", 2).read_text())
        rows[1]["subject"] = "Atlantis"
        args["--data_dir"] = str(_write(tmp_path / "ke.json", rows))
        args["--datatype"] = "counterfact"
    return [item for pair in args.items() for item in pair]


BAD_CASES = {
    "metrics_save_dir is a file": r"--metrics_save_dir .*taken is a file, not a folder",
    "pre_file is a folder": r"--pre_file .*pre is a folder; give the JSON file",
    "pre_file is not JSON": r"pre\.json: not a JSON file of pre-edit metrics .*remove it",
    "unknown method": r"--editing_method 'NOPE' is not in EasyEdit's ALG_DICT; known: ZeroUnlearn, ZeroUnlearn-GD",
    "missing hparams": r"--hparams_dir: hparams file not found: .*missing\.yaml",
    "bad hparams": r"--hparams_dir: .*bad\.yaml.*v_lr",
    "unknown hparams key": r"--hparams_dir: .*extra\.yaml.*not_a_key",
    "KnowEdit without --datatype": r"ke\.json is in KnowEdit format: --datatype must be counterfact, recent, zsre, "
    r"wikibio .*got None",
    "subject not in prompt": r"cf\.json: record 1: subject 'Atlantis' does not occur in its prompt 'the capital of s1 "
                             r"is'",
    "KnowEdit subject not in prompt": r"ke\.json: record 1: subject 'Atlantis' does not occur in its prompt",
    "deep YAML without few-shot facts": r"cf\.json: record 1: fewshot_contexts: only \d of the \d+ "
                                        r"built-in "
    r"few-shot facts .* request 1 \(subject 'a', answer 'paris'\) rules out \d+\. Give",
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_eval_script_bad_input_is_one_line_before_the_model_loads(case, tmp_path):
    """Issue 36.11: each was a raw traceback, or (subject) an error only when that record was edited."""
    argv = _bad_case(case, tmp_path)
    _FakeEditor.loads.clear()
    _FakeEditor.calls.clear()
    with pytest.raises(SystemExit) as raised:
        main(argv, easyedit=_fake_easyedit([_record(0), _record(1)]))
    message = str(raised.value.code)
    assert re.search(BAD_CASES[case], message), message
    assert "\n" not in message
    assert _FakeEditor.loads == [] and _FakeEditor.calls == [], "the model was loaded before the bad input was found"
    assert not (tmp_path / "out").exists(), "the output folder was created for a refused run"


def test_eval_script_easyedit_without_its_dependencies(tmp_path, monkeypatch, caplog):
    """Issue 36.11: registration logged 'not registering', then the script imported EasyEdit anyway (traceback)."""
    tree = tmp_path / "EasyEdit"
    (tree / "easyeditor" / "util").mkdir(parents=True)
    (tree / "easyeditor" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "easyeditor" / "util" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "easyeditor" / "util" / "alg_dict.py").write_text(
        "import zerounlearn_missing_dependency_xyz\n", encoding="utf-8"
    )
    (tree / "easyeditor" / "editors").mkdir()
    (tree / "easyeditor" / "editors" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "easyeditor" / "editors" / "batch_editor.py").write_text("class BatchEditor:\n    pass\n", encoding="utf-8")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("EASYEDIT_PATH", raising=False)
    for name in [m for m in sys.modules if m == "easyeditor" or m.startswith("easyeditor.")]:
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    argv = _bad_case("none", tmp_path) + ["--easyedit-path", str(tree)]
    with pytest.raises(
        SystemExit,
        match=r"EasyEdit was found but cannot be imported \(ModuleNotFoundError: No module "
        r"named 'zerounlearn_missing_dependency_xyz'\): install EasyEdit's requirements",
    ):
        main(argv)
    assert "not registering" in caplog.text


def test_neutral_mode_accepts_an_empty_target_new(tmp_path):
    """Issue 36.11: with --target-new neutral the dataset's target_new is not used, so "" (or none) is accepted;
    --target-new keep still refuses it, naming the record."""
    rows = [dict(_cf(0), target_new=""), _cf(1)]
    del rows[1]["target_new"]
    data = _write(tmp_path / "cf.json", rows)
    argv = ["--editing_method", "ZeroUnlearn", "--hparams_dir", str(_yaml(tmp_path)), "--data_dir", str(data),
            "--metrics_save_dir", str(tmp_path / "out")]
    _FakeEditor.calls.clear()
    summary = main(argv, easyedit=_fake_easyedit([]))
    assert summary["cases"] == 2 and _FakeEditor.calls[-1]["target_new"] == ["<eos>", "<eos>"]
    assert _FakeEditor.calls[-1]["prompts"] == ["the capital of s0 is", "the capital of s1 is"]
    _FakeEditor.loads.clear()
    with pytest.raises(SystemExit, match=r"record 1 \(counterfact format\) lacks field\(s\) \['target_new'\]"):
        main(argv + ["--target-new", "keep"], easyedit=_fake_easyedit([]))
    _write(data, [dict(_cf(0), target_new=""), _cf(1)])
    with pytest.raises(SystemExit, match="record 0 field target_new is empty"):
        main(argv + ["--target-new", "keep"], easyedit=_fake_easyedit([]))
    assert _FakeEditor.loads == []


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
        {
            "subject": s,
            "prompt": f"the capital of {s} is",
            "target_new": "rome",
            "ground_truth": a,
            "portability": {},
            "locality": {"Relation_Specificity": [{"prompt": "the old city in egypt is", "ground_truth": ["cairo"]}]},
        }
        for s, a in (("france", "paris"), ("germany", "berlin"))
    ]
    (tmp_path / "data.json").write_text(json.dumps(data), encoding="utf-8")
    summary = main(
        [
            "--editing_method",
            "ZeroUnlearn",
            "--hparams_dir",
            str(tmp_path / "zu.yaml"),
            "--data_dir",
            str(tmp_path / "data.json"),
            "--datatype",
            "counterfact",
            "--metrics_save_dir",
            str(tmp_path / "out"),
            "--no-test-generation",
        ]
    )
    assert summary["mode"] == "unlearn" and summary["target_new"] == "the" and summary["cases"] == 2
    assert (
        summary["forget_ground_truth_acc"]["pre"] is not None and summary["forget_ground_truth_acc"]["post"] is not None
    )


KNOWN_CF = FIXTURES / "smollm2_known_counterfact.json"
"""``case_ids`` of the first 10 CounterFact records SmolLM2 answers (written by this file's ``__main__``)."""


def _known_case_ids(model, tok, records: List[Dict[str, Any]], n: int = 10) -> List[int]:
    """``case_id`` of the first ``n`` records whose ``ground_truth`` the model gives (teacher-forced token
    accuracy 1)."""
    from zerounlearn_editor.data.types import Probe
    from zerounlearn_editor.evaluation.metrics import evaluate_probes

    acc = evaluate_probes(model, tok, [Probe(r["prompt"], r["ground_truth"]) for r in records])["acc"]
    return [r["case_id"] for r, a in zip(records, acc) if a == 1.0][:n]


@pytest.mark.slow
@pytest.mark.easyedit
def test_smollm2_counterfact_eval_ours_and_easyedit_memit(tmp_path, monkeypatch, request):
    """``run_easyedit_eval`` on 10 real records of EasyEdit's flat CounterFact, SmolLM2 by name (``smollm2``).

    The records are the first 10 of the file's first 300 whose answer SmolLM2 gives (teacher-forced
    token accuracy 1; most CounterFact facts it does not know). Their ``case_id``s are stored in
    ``tests/fixtures/smollm2_known_counterfact.json`` (scoring 300 records is not repeated here); the
    test checks that SmolLM2 still answers each of them and writes them unchanged to a file of the
    same format. ZeroUnlearn and EasyEdit's own MEMIT (hparams mapped from the ZeroUnlearn YAML as the
    bench does; it reads the same statistics file, never a dataset) both unlearn towards EOS.
    Every metric has a pre and a post value; ZeroUnlearn lowers the true answers' accuracy.
    (EasyEdit's ``rewrite_acc`` scores ``prompt + " " + target`` and counts pad tokens as padding;
    SmolLM2's pad token is its EOS, so for the EOS target it stays 0 and is not asserted on.)
    """
    if not _real_easyedit_importable():
        pytest.skip("EasyEdit is not importable: set EASYEDIT_PATH to an EasyEdit source tree in an environment "
                    "with EasyEdit's requirements")
    stored = json.loads(KNOWN_CF.read_text(encoding="utf-8"))
    try:
        data = shared_file(stored["data"])
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    from zerounlearn_editor.engine.hparams import load_config_file
    from zerounlearn_editor.harness import easyedit_baselines
    from zerounlearn_editor.support.resources import hparams_path

    model, tok = request.getfixturevalue("smollm2")
    stats_dir = request.getfixturevalue("smollm2_stats_dir")
    monkeypatch.chdir(tmp_path)  # EasyEdit writes ./logs
    records = {r["case_id"]: r for r in json.loads(Path(data).read_text(encoding="utf-8"))[: stored["scanned"]]}
    known = [records[i] for i in stored["case_ids"]]
    answered = _known_case_ids(model, tok, known)
    assert len(known) == 10 and answered == stored["case_ids"], f"SmolLM2 answers only {answered} of {KNOWN_CF}"
    data = _write(tmp_path / "counterfact_known.json", known)
    ours = load_config_file(hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct"))
    # the fluency guard only reads (the edit is the YAML's either way): off, 20 perplexity passes shorter
    ours.update(stats_dir=str(stats_dir), fluency_max_increase=None)
    (tmp_path / "zu.yaml").write_text(yaml.safe_dump(ours), encoding="utf-8")
    memit_cls = importlib.import_module("easyeditor.models.memit.memit_hparams").MEMITHyperParams
    mapped = easyedit_baselines.easyedit_config("MEMIT", ZeroUnlearnHyperParams.from_dict(ours), model, tmp_path)
    fields = {f.name for f in __import__("dataclasses").fields(memit_cls)}
    memit = {k: v for k, v in mapped.items() if k in fields}
    # MEMIT's target loop is its slow part on CPU; only its pre and post metrics are asserted on, not its forgetting
    memit.update(model_name="smollm2", device="cpu", v_num_grad_steps=3)
    (tmp_path / "memit.yaml").write_text(yaml.safe_dump(memit), encoding="utf-8")

    summaries = {}
    for method, path in (("ZeroUnlearn", "zu.yaml"), ("MEMIT", "memit.yaml")):
        summaries[method] = main(
            [
                "--editing_method",
                method,
                "--hparams_dir",
                str(tmp_path / path),
                "--data_dir",
                str(data),
                "--ds_size",
                "10",
                "--metrics_save_dir",
                str(tmp_path / "out"),
                "--no-test-generation",
            ]
        )
    for method, summary in summaries.items():
        assert summary["cases"] == 10 and summary["data_format"] == "counterfact" and summary["mode"] == "unlearn", (
            method
        )
        rows = [summary["forget_ground_truth_acc"], summary["rewrite_acc"], summary["rephrase_acc"],
                summary["locality"]["neighborhood_acc"], summary["portability"]["neighborhood_Ground_Truth_acc"]]
        for values in rows:
            assert values["pre"] is not None and values["post"] is not None, (method, summary)
        assert summary["forget_ground_truth_acc"]["pre"] >= 0.8, (method, summary["forget_ground_truth_acc"])
    truth = summaries["ZeroUnlearn"]["forget_ground_truth_acc"]
    assert truth["post"] < truth["pre"], truth  # one fact per edit with the paper's settings: 1.0 -> 0.8 measured
    assert summaries["ZeroUnlearn"]["pre_edit_file"] != summaries["MEMIT"]["pre_edit_file"]


if (
    __name__ == "__main__"
):  # rewrite KNOWN_CF: python tests/applications/test_easyedit_eval.py (in the EasyEdit venv, as the test runs)
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer, prepare_smollm2

    _name, _scanned = "counterfact/counterfact_easyedit_val_1919.json", 300
    _model, _tok = load_model_and_tokenizer(str(prepare_smollm2()))
    _records = json.loads(Path(shared_file(_name)).read_text(encoding="utf-8"))[:_scanned]
    _ids = _known_case_ids(_model, _tok, _records)
    KNOWN_CF.write_text(
        json.dumps({"data": _name, "scanned": _scanned, "model": "SmolLM2-135M-Instruct", "case_ids": _ids}, indent=1)
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {KNOWN_CF}: case_ids {_ids}")
