"""The files a ledger vouches for, hashed in full: every weight file of the saved model and its config.

:func:`weight_files_sha256` gives ``{file name: sha256 of its bytes}`` of a folder's ``*.safetensors`` files, their
index and ``config.json`` (SmolLM2-135M's 538 MB: about 0.6 s of one core); the ledger records it when it is written
(:func:`~zerounlearn_editor.applications.ledger.write_ledger`) and :func:`check_weight_files` compares it before
any model loads, so one changed value anywhere in the model (not only in the edited modules) is refused, whatever
dtype the model is then loaded in.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Type

from zerounlearn_editor.engine.retired_keys import RETIRED_STATE_FILE
from zerounlearn_editor.support.files import sha256_of_file

FILES_KEY = "files_sha256"
"""The ledger's field: ``{file name: sha256}``."""


def _is_vouched(path: Path) -> bool:
    name = path.name
    return path.is_file() and (name.endswith(".safetensors") and name != RETIRED_STATE_FILE
                               or name in ("config.json", "model.safetensors.index.json"))


def weight_files_sha256(folder: Path) -> Dict[str, str]:
    """``{name: sha256}`` of ``folder``'s weight files (``*.safetensors`` but an old folder's state file of a
    retired experiment, :data:`~zerounlearn_editor.engine.retired_keys.RETIRED_STATE_FILE`; the shard index) and
    ``config.json``, sorted by name."""
    return {p.name: sha256_of_file(p) for p in sorted(Path(folder).iterdir()) if _is_vouched(p)}


def check_weight_files(folder: Path, ledger: Mapping[str, Any], error: Type[ValueError] = ValueError) -> None:
    """Raise ``error`` naming the file when ``folder``'s weight files are not the ones ``ledger`` records (a file
    changed, missing or added). A ledger written before the files were recorded is not checked here."""
    recorded = ledger.get(FILES_KEY)
    if recorded is None:
        return
    actual = weight_files_sha256(folder)
    where = f"model folder {folder}"
    for name in sorted(set(recorded) | set(actual)):
        if name not in actual:
            raise error(f"{where}: {name} is missing (the ledger records its sha256); restore the folder an earlier "
                        "unlearn wrote")
        if name not in recorded:
            raise error(f"{where}: {name} is not one of the files the ledger vouches for (added after it was "
                        "written); restore the folder an earlier unlearn wrote")
        if actual[name] != recorded[name]:
            raise error(f"{where}: {name} differs from the one the ledger recorded (sha256 {actual[name][:12]}..., "
                        f"recorded {recorded[name][:12]}...): the model was changed after the ledger was written; "
                        "the ledger's facts do not describe it")


__all__ = ["FILES_KEY", "check_weight_files", "weight_files_sha256"]
