"""Locating the project's shipped files (``hparams/``) and the shared data folder."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

__all__ = ["repo_root", "hparams_path", "shared_data_dir", "shared_file"]


def repo_root() -> Path:
    """The checkout this package was installed from (editable install)."""
    return Path(__file__).resolve().parent.parent


def hparams_path(method: str, model: str) -> Path:
    """``hparams/{method}/{model}.yaml``, from the working directory or the checkout."""
    relative = Path("hparams") / method / f"{model}.yaml"
    for base in (Path.cwd(), repo_root()):
        if (base / relative).is_file():
            return base / relative
    raise FileNotFoundError(f"hparams file {relative} not found in {Path.cwd()} or {repo_root()}")


def shared_data_dir() -> Optional[Path]:
    """``$ZEROUNLEARN_DATA_DIR``, else ``../shared/data`` beside the working dir or the checkout."""
    env = os.environ.get("ZEROUNLEARN_DATA_DIR")
    candidates = [Path(env)] if env else []
    candidates += [Path.cwd().parent / "shared" / "data", repo_root().parent / "shared" / "data"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return None


def shared_file(relative: str) -> Path:
    """A file under the shared data folder; raises FileNotFoundError naming it."""
    base = shared_data_dir()
    if base is None or not (base / relative).is_file():
        raise FileNotFoundError(
            f"shared data file {relative!r} not found (set ZEROUNLEARN_DATA_DIR to the data folder)"
        )
    return base / relative
