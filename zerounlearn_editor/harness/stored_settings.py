"""Stored results and the settings they were made with: a result is resumed only under the settings of this run.

The bench (:mod:`.runner`, one seed file per seed) and the scale bench (:mod:`.scale`, one file per row or round)
record with every result the settings that change it; on a rerun :func:`settings_differences` lists the ones that
differ and :func:`refuse_other_settings` stops the run naming them, so one table never mixes two configurations.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.support.files import file_identity, json_safe

__all__ = ["settings_differences", "refuse_other_settings", "check_stored_run", "as_stored", "hparams_identity"]


def hparams_identity(path: Union[str, Path], retain_file: Optional[str]) -> Dict[str, Any]:
    """How a result names the YAML it was made with: :func:`~zerounlearn_editor.support.files.file_identity` of
    ``path``, plus ``"retain_file"``, the identity of the retain file the YAML names (``retain_file``, already
    resolved against the YAML's folder), when it names one: the edit reads that file, so a result made with
    other retain prompts is another configuration. A YAML without one keeps the YAML-only identity (stored
    results stay valid). Raises :class:`BenchConfigError` naming the YAML when the retain file is missing."""
    identity: Dict[str, Any] = file_identity(path)
    if retain_file:
        if not Path(retain_file).is_file():
            raise BenchConfigError(f"{path}: retain_file {retain_file!r} is not a file")
        identity["retain_file"] = file_identity(retain_file)
    return identity


def as_stored(settings: Mapping[str, Any]) -> dict:
    """``settings`` as they read back from a JSON file (tuples as lists, non-finite floats as ``None``)."""
    return json.loads(json.dumps(json_safe(dict(settings))))


def settings_differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> List[str]:
    """``"<key>: <stored> there, <current> here"`` for every key of ``current`` whose stored value differs
    (a key the stored settings lack reads as ``None``)."""
    current = as_stored(current)
    return [f"{key}: {stored.get(key)!r} there, {value!r} here" for key, value in current.items()
            if stored.get(key) != value]


def refuse_other_settings(path: Union[str, Path], differences: Sequence[str]) -> None:
    """Raise :class:`BenchConfigError` naming ``path`` and the differing settings, if there are any."""
    if differences:
        raise BenchConfigError(
            f"{path} holds results of another configuration ({'; '.join(differences)}); use another --out or remove it"
        )


def check_stored_run(path: Union[str, Path], record: Mapping[str, Any], run_info: Mapping[str, Any],
                     case_ids: Sequence[str]) -> None:
    """Refuse a stored seed file (``{"run": its settings, "case_ids": its sample, ...}``) of other settings or
    another sample of cases than ``run_info`` and ``case_ids``."""
    differences = settings_differences(record.get("run", {}), run_info)
    if record.get("case_ids") != list(case_ids):
        differences.append("case_ids: a different sample of cases")
    refuse_other_settings(path, differences)
