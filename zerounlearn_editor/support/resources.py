"""Locating the project's shipped files (``hparams/``) and the benchmark data folder.

Hparams: ``hparams/<Method>/<model>.yaml`` from the working directory, the checkout (editable install), or the
copy a wheel carries in ``zerounlearn_editor/_hparams`` (see ``setup.py``). Data folder (benchmark datasets,
never shipped): ``--data-dir`` (:func:`set_data_dir`), else ``$ZEROUNLEARN_DATA_DIR``, else ``../shared/data``
beside the working directory or the checkout.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Tuple, Union

DATA_DIR_ENV = "ZEROUNLEARN_DATA_DIR"


def repo_root() -> Path:
    """The checkout this package was installed from (editable install)."""
    return Path(__file__).resolve().parents[2]


def hparams_path(method: str, model: str) -> Path:
    """``hparams/{method}/{model}.yaml``, from the working directory, the checkout or the installed copy."""
    installed = Path(__file__).resolve().parents[1] / "_hparams"  # the copy a wheel carries
    bases = [Path.cwd() / "hparams", repo_root() / "hparams", installed]
    for base in bases:
        if (base / method / f"{model}.yaml").is_file():
            return base / method / f"{model}.yaml"
    relative = Path("hparams") / method / f"{model}.yaml"
    raise FileNotFoundError(f"hparams file {relative} not found in {', '.join(str(b) for b in bases)}")


def set_data_dir(path: Union[str, Path]) -> Path:
    """Use ``path`` as the data folder for this process (what ``--data-dir`` does)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"--data-dir {path}: no such folder")
    os.environ[DATA_DIR_ENV] = str(folder.resolve())
    return folder


def data_dir_candidates() -> List[Tuple[Path, str]]:
    """The folders searched for benchmark data, in order, each with where it comes from."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return [(Path(env).expanduser(), f"${DATA_DIR_ENV} / --data-dir")]
    return [
        ((Path.cwd().parent / "shared" / "data").resolve(), "../shared/data beside the working directory"),
        ((repo_root().parent / "shared" / "data").resolve(), "../shared/data beside the installed package's checkout"),
    ]


def shared_data_dir() -> Optional[Path]:
    """The first existing folder of :func:`data_dir_candidates`, else ``None``."""
    for candidate, _ in data_dir_candidates():
        if candidate.is_dir():
            return candidate
    return None


def missing_data_message(relative: str) -> str:
    """Why ``relative`` was not found: every folder looked in, and how to point at the data."""
    looked = "; ".join(f"{folder / relative} ({origin})" for folder, origin in dict.fromkeys(data_dir_candidates()))
    return (
        f"data file {relative!r} not found; looked in: {looked}. Point at the folder that holds it "
        f"(with counterfact/, zsre/, text/, ...) with --data-dir DIR or {DATA_DIR_ENV}=DIR, "
        "or give the file itself (e.g. bench --data-path FILE)"
    )


def shared_file(relative: str) -> Path:
    """A file under the data folder; raises FileNotFoundError naming every place looked in."""
    for folder, _ in data_dir_candidates():
        if (folder / relative).exists():
            return folder / relative
    raise FileNotFoundError(missing_data_message(relative))
