"""Unlearning across processes: ``zerounlearn unlearn --save model`` writes a ledger, ``unlearn --model`` on that
folder continues from it (tiny Llama on disk), every way a continuation can be wrong is refused, and a folder the
version with the forgotten-facts protection experiment wrote (its state file beside the ledger) still continues."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tiny_models import CORPUS, REPO_ROOT, saved_tiny_llama, tiny_hparams_dict, tiny_llama, tiny_tokenizer
from zerounlearn_editor import ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model
from zerounlearn_editor.applications.ledger import LEDGER_NAME, REPORT_NAME, ledger_hash
from zerounlearn_editor.applications.ledger_files import FILES_KEY
from zerounlearn_editor.cli import main
from zerounlearn_editor.support.output_dir import TEMP_TAG

FACTS_1 = [{"prompt": "the capital of france is", "subject": "france", "answer": "paris"},
           {"prompt": "the capital of germany is", "subject": "germany", "answer": "berlin"},
           {"prompt": "the capital of japan is", "subject": "japan", "answer": "tokyo"}]
FACTS_2 = [{"prompt": "the capital of italy is", "subject": "italy", "answer": "rome"},
           {"prompt": "the capital of spain is", "subject": "spain", "answer": "madrid"}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny base model folder, facts files, a GD YAML (and variants) and a first ``--save model`` run."""
    root = tmp_path_factory.mktemp("ledger")
    base, corpus = saved_tiny_llama(root, "tiny-base")
    (root / "ppl.txt").write_text(" ".join(CORPUS), encoding="utf-8")
    for name, facts in (("facts1.json", FACTS_1), ("facts2.json", FACTS_2)):
        (root / name).write_text(json.dumps(facts), encoding="utf-8")
    yamls = {}
    common = dict(model_name=str(base), nullspace_threshold=1e-2, norm_weight=0.1, fluency_max_increase=None)
    for key, alg, extra in (("gd", "ZeroUnlearn-GD", {}),
                            ("layers", "ZeroUnlearn-GD", dict(layers=[2, 3])),
                            ("zu", "ZeroUnlearn", {}),
                            ("other_stats", "ZeroUnlearn-GD", {})):
        stats = root / ("empty_stats" if key == "other_stats" else "stats")
        config = tiny_hparams_dict(stats, corpus, alg_name=alg, **common, **extra)
        if alg == "ZeroUnlearn":
            config.pop("nullspace_threshold"), config.pop("norm_weight")
        yamls[key] = root / f"{key}.yaml"
        yamls[key].write_text(yaml.safe_dump(config), encoding="utf-8")
    first = root / "first"
    assert _run(root, yamls["gd"], "facts1.json", "--out", str(first), "--save", "model") == 0
    return root, base, yamls, tiny_tokenizer(), first


def _run(root: Path, hparams: Path, facts: str, *extra: str) -> int:
    return main(["unlearn", "--hparams", str(hparams), "--facts", str(root / facts), "--ppl-tokens", "0",
                 "--no-progress", *extra])


def _ledger(folder: Path) -> dict:
    return json.loads((folder / LEDGER_NAME).read_text(encoding="utf-8"))


def _down_proj(folder: Path, layer: int) -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))[f"model.layers.{layer}.mlp.down_proj.weight"]


def _hashes(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_first_run_writes_a_ledger_beside_the_model_and_no_state_file(setup):
    root, base, yamls, _, first = setup
    ledger = _ledger(first)
    assert ledger["method"] == "ZeroUnlearn-GD" and ledger["layers"] == [1, 2] and ledger["saved"] == "model"
    assert [f["prompt"] for f in ledger["facts"]] == [f["prompt"] for f in FACTS_1]
    assert [f["answer"] for f in ledger["facts"]] == ["paris", "berlin", "tokyo"]
    assert len(ledger["edits"]) == 1 and ledger["edits"][0]["hparams_file"] == "gd.yaml"
    assert ledger["edits"][0]["hparams_sha256"] == hashlib.sha256(yamls["gd"].read_bytes()).hexdigest()
    assert ledger["base_model"]["name"] == str(base) and ledger["base_model"]["basename"] == "tiny-base"
    assert ledger["statistics"]["model_name"] == "tiny-base" and set(ledger["statistics"]["files"]) == {"1", "2"}
    assert ledger["ledger_sha256"] == ledger_hash(ledger)
    # issue 47: the folder holds the model, its tokenizer, the ledger and the report; no forgotten-facts state
    assert "state" not in ledger and "forgotten_protection_weight" not in ledger["edits"][0]
    assert not (first / "forgotten_state.safetensors").exists()
    assert sorted(p.name for p in first.glob("*.safetensors")) == ["model.safetensors"]
    assert set(ledger[FILES_KEY]) == {"config.json", "model.safetensors"}
    assert {LEDGER_NAME, REPORT_NAME, "config.json", "model.safetensors"} <= {p.name for p in first.iterdir()}


def test_continuing_equals_the_sequential_edit_in_one_process(setup):
    """unlearn --model FIRST on new facts == the same two edits in one process (base C0, the same prefixes)."""
    root, base, yamls, tok, first = setup
    second = root / "second"
    assert _run(root, yamls["gd"], "facts2.json", "--model", str(first), "--out", str(second), "--save", "model") == 0
    ledger = _ledger(second)
    assert [f["prompt"] for f in ledger["facts"]] == [f["prompt"] for f in FACTS_1 + FACTS_2]
    assert [f["edit"] for f in ledger["facts"]] == [0, 0, 0, 1, 1] and len(ledger["edits"]) == 2
    assert ledger["base_model"] == _ledger(first)["base_model"]
    assert not list(second.glob("forgotten_*"))
    # C0 came from the base model's cache: nothing was computed for the edited folders
    assert sorted(p.name for p in (root / "stats").iterdir()) == ["tiny-base"]

    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    hp = ZeroUnlearnGDHyperParams.from_hparams(yamls["gd"])
    model, tok = load_model_and_tokenizer(str(base))  # as unlearn loads it (its tokenizer pads with EOS)
    requests = [{"prompt": f["prompt"], "subject": f["subject"], "ground_truth": f["answer"]} for f in FACTS_1]
    model, _ = apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False)
    requests = [{"prompt": f["prompt"], "subject": f["subject"], "ground_truth": f["answer"]} for f in FACTS_2]
    model, _ = apply_zerounlearn_gd_to_model(model, tok, requests, hp, progress=False)
    for layer in (1, 2):
        in_process = model.model.layers[layer].mlp.down_proj.weight.detach()
        saved = _down_proj(second, layer)
        assert float((saved - in_process).norm() / in_process.norm()) < 1e-6
        assert float((saved - _down_proj(first, layer)).norm()) > 1e-4 * float(saved.norm())  # round 2 edited


def _copy_first(setup, name: str) -> Path:
    root, _, _, _, first = setup
    target = root / name
    shutil.copytree(first, target)
    return target


def _refused(setup, caplog, folder: Path, message: str, yaml_key: str = "gd") -> None:
    root, _, yamls, _, _ = setup
    out = root / f"out-{folder.name}"
    assert _run(root, yamls[yaml_key], "facts2.json", "--model", str(folder), "--out", str(out), "--save", "model") == 2
    assert message in caplog.text, caplog.text
    assert not out.exists()


def test_a_tampered_ledger_is_refused(setup, caplog):
    folder = _copy_first(setup, "tampered")
    ledger = _ledger(folder)
    ledger["facts"][0]["prompt"] = "the capital of mars is"
    (folder / LEDGER_NAME).write_text(json.dumps(ledger), encoding="utf-8")
    _refused(setup, caplog, folder, "does not match its ledger_sha256")


def _as_written_before_issue_47(folder: Path) -> None:
    """Make ``folder`` what the version with the protection experiment (commit bc98db8) wrote: a state file
    beside the ledger (not one of the files the ledger vouches for), the ledger's ``state`` field naming it and a
    protection weight per edit (format zerounlearn-ledger/2 then too), its ``ledger_sha256`` recomputed."""
    state = folder / "forgotten_state.safetensors"
    state.write_bytes(b"a state of the earlier forget keys")  # never read now
    ledger = _ledger(folder)
    assert ledger["format"] == "zerounlearn-ledger/2"
    ledger["state"] = {"file": state.name, "sha256": hashlib.sha256(state.read_bytes()).hexdigest(),
                       "count": len(ledger["facts"])}
    for edit in ledger["edits"]:
        edit["forgotten_protection_weight"] = 1.0
    ledger["ledger_sha256"] = ledger_hash(ledger)
    (folder / LEDGER_NAME).write_text(json.dumps(ledger, indent=1), encoding="utf-8")


def test_a_folder_with_the_retired_state_file_continues_and_the_state_is_ignored(setup, caplog):
    """An old folder (state file and field of the retired experiment) continues as the same folder without them
    would: the same ledger facts and statuses, the same weights; the note says the state is ignored, and the new
    folder holds no state file."""
    root, _, yamls, _, first = setup
    old = _copy_first(setup, "old-version")
    _as_written_before_issue_47(old)
    caplog.set_level(logging.INFO)
    from_old, from_new = root / "from-old", root / "from-new"
    assert _run(root, yamls["gd"], "facts2.json", "--model", str(old), "--out", str(from_old), "--save", "model") == 0
    assert "forgotten_state.safetensors and the ledger's state field" in caplog.text
    assert "are ignored" in caplog.text and "experiment/forgotten-protection" in caplog.text
    assert _run(root, yamls["gd"], "facts2.json", "--model", str(first), "--out", str(from_new), "--save", "model") == 0
    a, b = _ledger(from_old), _ledger(from_new)
    assert "state" not in a and not (from_old / "forgotten_state.safetensors").exists()
    assert [(f["prompt"], f["status"]) for f in a["facts"]] == [(f["prompt"], f["status"]) for f in b["facts"]]
    assert a["edits"][0]["forgotten_protection_weight"] == 1.0  # the old edit's record, as it was
    assert "forgotten_protection_weight" not in a["edits"][1]
    for layer in (1, 2):
        assert torch.equal(_down_proj(from_old, layer), _down_proj(from_new, layer))


def test_another_method_or_layer_set_is_refused(setup, caplog):
    root, _, _, _, first = setup
    _refused(setup, caplog, first, "continue with the same method", yaml_key="zu")
    _refused(setup, caplog, first, "a ledger records the edits of one set of modules", yaml_key="layers")


def test_a_foreign_base_model_is_refused(setup, caplog):
    """The ledger of FIRST beside another model: its unedited modules are not the base's."""
    root, _, _, tok, first = setup
    folder = root / "foreign"
    tiny_llama(tok, seed=7).save_pretrained(folder)
    tok.save_pretrained(folder)
    shutil.copy(first / LEDGER_NAME, folder / LEDGER_NAME)
    _refused(setup, caplog, folder, "model.safetensors differs from the one the ledger recorded")


def test_weights_changed_after_the_ledger_are_refused(setup, caplog):
    from safetensors.torch import load_file, save_file

    folder = _copy_first(setup, "changed")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.layers.2.mlp.down_proj.weight"][0, 0] += 1e-3
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    _refused(setup, caplog, folder, "model.safetensors differs from the one the ledger recorded")


def test_missing_base_statistics_are_refused_not_recomputed(setup, caplog):
    root, _, _, _, first = setup
    _refused(setup, caplog, first, "the base model's statistics file", yaml_key="other_stats")
    assert not (root / "empty_stats").exists()  # nothing was computed from the edited model


def test_an_adapter_folder_is_refused_with_the_way_to_go_on(setup, caplog):
    root, _, yamls, _, _ = setup
    adapter = root / "adapter"
    assert _run(root, yamls["gd"], "facts1.json", "--out", str(adapter), "--save", "adapter") == 0
    assert _ledger(adapter)["saved"] == "adapter" and not list(adapter.glob("forgotten_*"))
    _refused(setup, caplog, adapter, "continuing from an adapter folder is not supported")


KILLER = """
import os, signal, sys
import zerounlearn_editor.applications.unlearn as unlearn
def killed(*args, **kwargs):  # the model is already in the staging folder; the ledger is not
    os.kill(os.getpid(), signal.SIGKILL)
unlearn.write_ledger = killed
from zerounlearn_editor.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_while_saving_leaves_the_earlier_folder_whole(setup):
    root, _, yamls, _, first = setup
    folder = _copy_first(setup, "killed")
    before = _hashes(folder)
    args = ["unlearn", "--hparams", str(yamls["gd"]), "--facts", str(root / "facts2.json"), "--ppl-tokens", "0",
            "--no-progress", "--model", str(folder), "--out", str(folder), "--save", "model"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", KILLER, *args], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert _hashes(folder) == before  # model and ledger as the earlier run wrote them
    leftovers = [p for p in root.iterdir() if p.name.startswith(f".killed{TEMP_TAG}")]
    assert leftovers and (leftovers[0] / "model.safetensors").is_file()  # it was killed mid-save
    # the next run continues from the whole folder (and removes the killed run's leftovers)
    assert main(args) == 0
    assert len(_ledger(folder)["facts"]) == 5
    assert not [p for p in root.iterdir() if p.name.startswith(f".killed{TEMP_TAG}")]
