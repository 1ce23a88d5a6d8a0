"""Build (once) and print the Python of a venv in which EasyEdit's source tree imports.

Usage: ``python .ci/easyedit_env.py EASYEDIT_TREE`` prints the venv's ``bin/python``.

The venv is created with ``--system-site-packages`` (it sees the global torch and the project
installed by ``.ci/run``) and gets ``.ci/easyedit-requirements.txt`` with ``--no-deps``, so the
global environment is never changed. It lives in
``$ZEROUNLEARN_EASYEDIT_VENVS/<key>`` (default ``~/.cache/zerounlearn_editor/easyedit-venv/<key>``),
``key`` a hash of the requirements file, this script, the Python version and the torch version:
a later run with the same inputs reuses it. It is built under a temporary name and renamed into
place only after ``from easyeditor import BaseEditor`` succeeded in it, so an interrupted build
is never reused.

PyPI's torchvision wheel is a CUDA build; beside a CPU torch its compiled ops do not load and
two unguarded ``torch.library.register_fake("torchvision::...nms")`` calls in
``torchvision/_meta_registrations.py`` fail at import. Inside the venv those two decorators are
made conditional on ``torchvision.extension._has_ops()``, as torchvision already does for its
other fake ops.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

LOG = logging.getLogger("easyedit_env")

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "easyedit-requirements.txt"
NMS_OPS = ("nms", "qnms")


def venv_root() -> Path:
    """Folder holding the keyed venvs."""
    configured = os.environ.get("ZEROUNLEARN_EASYEDIT_VENVS")
    if configured:
        return Path(configured).expanduser()
    cache = os.environ.get("ZEROUNLEARN_CACHE")
    base = Path(cache).expanduser() if cache else Path.home() / ".cache" / "zerounlearn_editor"
    return base / "easyedit-venv"


def _torch_version() -> str:
    try:
        import torch
    except ImportError:
        return "none"
    return torch.__version__


def env_key() -> str:
    """Hash of what the venv depends on: requirements, this script, Python and torch versions."""
    digest = hashlib.sha256()
    for part in (REQUIREMENTS.read_bytes(), Path(__file__).read_bytes(), sys.version.encode(), _torch_version().encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def _run(cmd: list, **kwargs) -> None:
    """Run ``cmd``; its output goes to stderr (stdout carries only the venv's python path)."""
    LOG.info("+ %s", " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, stdout=sys.stderr, **kwargs)


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip())


def guard_torchvision_fake_ops(site_packages: Path) -> None:
    """Make torchvision's two unguarded ``register_fake`` decorators conditional (see module doc)."""
    path = site_packages / "torchvision" / "_meta_registrations.py"
    text = path.read_text(encoding="utf-8")
    for op in NMS_OPS:
        plain = f'@torch.library.register_fake("torchvision::{op}")\n'
        guarded = (
            f'@(torch.library.register_fake("torchvision::{op}") if torchvision.extension._has_ops() '
            "else (lambda f: f))\n"
        )
        if guarded in text:
            continue
        if text.count(plain) != 1:
            raise SystemExit(f"{path}: expected one line {plain.strip()!r} to guard; torchvision changed?")
        text = text.replace(plain, guarded)
    path.write_text(text, encoding="utf-8")


def check_import(python: Path, easyedit_tree: Path) -> None:
    """``from easyeditor import BaseEditor`` in ``python`` with ``easyedit_tree`` on its path."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import transformers; "
        "from easyeditor import BaseEditor; print('easyeditor imports, transformers', transformers.__version__)"
    )
    _run([python, "-c", code, easyedit_tree], env=env)


def build(target: Path, easyedit_tree: Path) -> None:
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _run([sys.executable, "-m", "venv", "--system-site-packages", tmp])
        python = tmp / "bin" / "python"
        _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "-r", REQUIREMENTS])
        guard_torchvision_fake_ops(_site_packages(python))
        check_import(python, easyedit_tree)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure(easyedit_tree: Path) -> Path:
    """The venv's python, building the venv when no complete one with this key exists."""
    if not (easyedit_tree / "easyeditor").is_dir():
        raise SystemExit(f"{easyedit_tree}: not an EasyEdit source tree (no easyeditor/ in it)")
    root = venv_root()
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob("*.tmp-*"):  # left by killed builds (a running build is younger than an hour)
        if time.time() - stale.stat().st_mtime > 3600:
            shutil.rmtree(stale, ignore_errors=True)
    target = root / env_key()
    python = target / "bin" / "python"
    if python.exists():
        LOG.info("reusing %s", target)
    else:
        LOG.info("building %s", target)
        build(target, easyedit_tree)
    return python


def main(argv: list) -> int:
    logging.basicConfig(level=logging.INFO, format="easyedit_env: %(message)s", stream=sys.stderr)
    if len(argv) != 1:
        raise SystemExit("usage: python .ci/easyedit_env.py EASYEDIT_TREE")
    print(ensure(Path(argv[0]).resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
