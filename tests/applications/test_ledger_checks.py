"""A ledger folder checked before any model loads (tiny Llama on disk): every field of the ledger has the shape a
ledger has (one-line errors naming the field, issue 46 item 13), and the model's files are the ones the ledger
recorded, byte for byte (one changed value anywhere is refused, item 11)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tiny_models import saved_tiny_llama, tiny_hparams_dict
from zerounlearn_editor.applications.ledger import LEDGER_NAME, ledger_hash
from zerounlearn_editor.applications.ledger_files import FILES_KEY
from zerounlearn_editor.applications.ledger_schema import check_ledger_schema
from zerounlearn_editor.cli import main

FACTS_1 = [{"prompt": "the capital of france is", "subject": "france", "answer": "paris"},
           {"prompt": "the capital of germany is", "subject": "germany", "answer": "berlin"}]
FACTS_2 = [{"prompt": "the capital of italy is", "subject": "italy", "answer": "rome"}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny base model folder, a GD YAML, and a first ``--save model`` run on it."""
    root = tmp_path_factory.mktemp("ledger_checks")
    base, corpus = saved_tiny_llama(root, "tiny-base")
    for name, facts in (("facts1.json", FACTS_1), ("facts2.json", FACTS_2)):
        (root / name).write_text(json.dumps(facts), encoding="utf-8")
    config = tiny_hparams_dict(root / "stats", corpus, alg_name="ZeroUnlearn-GD", model_name=str(base),
                               nullspace_threshold=1e-2, norm_weight=0.1, fluency_max_increase=None)
    hparams = root / "gd.yaml"
    hparams.write_text(yaml.safe_dump(config), encoding="utf-8")
    first = root / "first"
    assert _run(root, hparams, "facts1.json", "--out", str(first), "--save", "model") == 0
    return root, hparams, first


def _run(root: Path, hparams: Path, facts: str, *extra: str) -> int:
    return main(["unlearn", "--hparams", str(hparams), "--facts", str(root / facts), "--ppl-tokens", "0",
                 "--no-progress", *extra])


def _copy(setup, name: str) -> Path:
    root, _, first = setup
    target = root / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(first, target)
    return target


@pytest.fixture
def no_model_load(monkeypatch):
    from zerounlearn_editor.support import model_zoo

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the folder was refused")

    monkeypatch.setattr(model_zoo, "load_model_and_tokenizer", refuse)


def _refused(setup, caplog, folder: Path, message: str) -> None:
    root, hparams, _ = setup
    out = root / f"out-{folder.name}"
    assert _run(root, hparams, "facts2.json", "--model", str(folder), "--out", str(out), "--save", "model") == 2
    assert message in caplog.text, caplog.text
    assert "Traceback" not in caplog.text and "Logging error" not in caplog.text
    assert not out.exists()


def _rehash(ledger: dict) -> dict:
    """What a hostile user does after editing a ledger: recompute its hash."""
    ledger = {k: v for k, v in ledger.items() if k != "ledger_sha256"}
    ledger["ledger_sha256"] = ledger_hash(ledger)
    return ledger


def _set_counts(ledger: dict) -> None:
    layer = next(iter(ledger["statistics"]["counts"]))
    ledger["statistics"]["counts"][layer] = "x"


MALFORMED = [
    ("no-statistics", lambda l: l.pop("statistics"), "field statistics must be present, got missing"),
    ("base-null", lambda l: l.update(base_model=None), "field base_model must be an object, got null None"),
    ("edits-int", lambda l: l.update(edits=5), "field edits must be a list, got int 5"),
    ("prefixes-int", lambda l: l.update(context_prefixes=7), "field context_prefixes must be a list, got int 7"),
    ("counts-str", _set_counts, "must be an integer, got str 'x'"),
    ("facts-str", lambda l: l.update(facts="ab"), "field facts must be a list, got str 'ab'"),
    ("fact-no-prompt", lambda l: l["facts"][1].pop("prompt"), "field facts[1].prompt must be present"),
    ("fact-edit-str", lambda l: l["facts"][0].update(edit="0"), "field facts[0].edit must be an integer"),
    ("fact-edit-range", lambda l: l["facts"][0].update(edit=3), "field facts[0].edit is 3, the ledger lists edits"),
    ("layers-empty", lambda l: l.update(layers=[]), "field layers must be a non-empty list"),
    ("files-int", lambda l: l.update(files_sha256=3), "field files_sha256 must be an object"),
]


@pytest.mark.parametrize("name, change, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_ledger_is_refused_naming_the_field(setup, caplog, no_model_load, name, change, message):
    folder = _copy(setup, f"malformed-{name}")
    ledger = json.loads((folder / LEDGER_NAME).read_text(encoding="utf-8"))
    change(ledger)
    (folder / LEDGER_NAME).write_text(json.dumps(_rehash(ledger)), encoding="utf-8")
    _refused(setup, caplog, folder, message)
    assert f"{folder / LEDGER_NAME}: malformed ledger" in caplog.text


def test_the_schema_takes_a_written_ledger_and_the_per_fact_status(setup):
    _, _, first = setup
    ledger = json.loads((first / LEDGER_NAME).read_text(encoding="utf-8"))
    check_ledger_schema(ledger, "first")
    ledger["facts"][0].update(status="forgotten", as_of_edit=0)
    check_ledger_schema(ledger, "first")
    ledger["facts"][0].update(as_of_edit="0")
    with pytest.raises(ValueError, match=r"^first: malformed ledger: field facts\[0\].as_of_edit must be an integer"):
        check_ledger_schema(ledger, "first")


def _tamper(folder: Path, name: str, change) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors[name])
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_the_ledger_records_every_weight_file_in_full(setup):
    import hashlib

    _, _, first = setup
    recorded = json.loads((first / LEDGER_NAME).read_text(encoding="utf-8"))[FILES_KEY]
    assert sorted(recorded) == ["config.json", "model.safetensors"]
    assert recorded["model.safetensors"] == hashlib.sha256((first / "model.safetensors").read_bytes()).hexdigest()


@pytest.mark.parametrize("where, change", [
    # one element of an edited module, off the sampled digest's positions (4,096 evenly spaced values)
    ("model.layers.2.mlp.down_proj.weight", lambda w: w.view(-1)[w.numel() // 2 + 1].add_(2.0)),
    # one row of an unedited module (the fingerprint samples 64 values a tensor)
    ("model.layers.1.mlp.up_proj.weight", lambda w: w[5].zero_()),
])
def test_a_changed_weight_anywhere_is_refused(setup, caplog, no_model_load, where, change):
    folder = _copy(setup, f"changed-{where.split('.')[2]}-{where.split('.')[4]}")
    _tamper(folder, where, change)
    _refused(setup, caplog, folder, "model.safetensors differs from the one the ledger recorded")


def test_an_added_or_missing_weight_file_is_refused(setup, caplog, no_model_load):
    folder = _copy(setup, "added-file")
    shutil.copy(folder / "model.safetensors", folder / "model-extra.safetensors")
    _refused(setup, caplog, folder, "model-extra.safetensors is not one of the files the ledger vouches for")
    (folder / "model-extra.safetensors").unlink()
    (folder / "config.json").unlink()
    _refused(setup, caplog, folder, "config.json is missing")


def test_an_unchanged_folder_continues(setup):
    root, hparams, _ = setup
    folder = _copy(setup, "unchanged")
    second = root / "second"
    assert _run(root, hparams, "facts2.json", "--model", str(folder), "--out", str(second), "--save", "model") == 0
    ledger = json.loads((second / LEDGER_NAME).read_text(encoding="utf-8"))
    assert len(ledger["facts"]) == 3 and len(ledger[FILES_KEY]) == 2


def _stats(root: Path):
    return {p: p.read_bytes() for p in sorted((root / "stats").rglob("*.npz"))}


def test_a_folder_continues_in_another_dtype(setup):
    """A float32 folder continued with ``--dtype float16`` is the same model (issue 46 item 10), and its ``C0``
    cache is read, not rewritten."""
    root, hparams, _ = setup
    folder = _copy(setup, "to-half")
    cached = _stats(root)
    out = root / "half-continued"
    assert _run(root, hparams, "facts2.json", "--model", str(folder), "--dtype", "float16", "--out", str(out),
                "--save", "model") == 0
    assert len(json.loads((out / LEDGER_NAME).read_text(encoding="utf-8"))["facts"]) == 3
    assert _stats(root) == cached


def test_a_float16_first_run_continues_in_float32(setup):
    root, hparams, _ = setup
    cached = _stats(root)
    half = root / "half-first"
    if half.exists():
        shutil.rmtree(half)
    assert _run(root, hparams, "facts1.json", "--dtype", "float16", "--out", str(half), "--save", "model") == 0
    out = root / "full-continued"
    assert _run(root, hparams, "facts2.json", "--model", str(half), "--out", str(out), "--save", "model") == 0
    assert _stats(root) == cached
