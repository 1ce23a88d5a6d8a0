"""Stored results and the settings they were made with: a result is resumed only under the settings of this run.

The bench (:mod:`.runner`, one seed file per seed) and the scale bench (:mod:`.scale`, one file per row or round)
record with every result the settings that change it; on a rerun :func:`settings_differences` lists the ones that
differ and :func:`refuse_other_settings` stops the run naming them, so one table never mixes two configurations.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.support.files import file_identity, json_safe, read_json

__all__ = ["settings_differences", "refuse_other_settings", "check_stored_run", "as_stored", "hparams_identity",
           "PPL_BOS_WINDOWS", "ppl_bos_windows", "check_ppl_windows", "mark_ppl_windows",
           "check_one_ppl_layout"]

PPL_BOS_WINDOWS = "ppl_bos_windows"
"""The key a result records ``True`` under when its perplexity opened every window with BOS
(:mod:`zerounlearn_editor.evaluation.perplexity`); a result without it read every window as tokenized."""


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


def ppl_bos_windows(tok: Any, ppl_text: Optional[str]) -> bool:
    """Whether a perplexity of ``ppl_text`` (a file or text; ``None``: no perplexity) opens every window with BOS:
    the tokenizer opens the text with its BOS token (Gemma, Llama-3; not SmolLM2)."""
    from zerounlearn_editor.evaluation.perplexity import leading_token_ids, opens_with_bos, read_text

    return ppl_text is not None and opens_with_bos(tok, leading_token_ids(tok, read_text(ppl_text), 1))


def check_ppl_windows(path: Union[str, Path], stored: Mapping[str, Any], bos_windows: bool) -> None:
    """Refuse (:func:`refuse_other_settings`) a stored result whose perplexity windows were laid out otherwise than
    this run's: ``stored`` (its settings) records :data:`PPL_BOS_WINDOWS` true when they opened with BOS; results
    stored before the key was recorded read every window as tokenized, which for a tokenizer without a leading BOS
    (SmolLM2) is the same layout, so they stay valid there."""
    there = bool(stored.get(PPL_BOS_WINDOWS, False))
    if there != bos_windows:
        refuse_other_settings(path, [f"{PPL_BOS_WINDOWS}: {there} there, {bos_windows} here (perplexity "
                                     "windows opening with BOS; results stored before the key read every window "
                                     "as tokenized)"])


def mark_ppl_windows(out: Path, seeds: Sequence[int], records: Sequence[dict], tok: Any, ppl_text: Optional[str],
                     seed_file: Callable[[Path, int], Path]) -> None:
    """Once the tokenizer is loaded, before a seed file of ``out`` (``seed_file(out, seed)``) gains a result: refuse
    a stored one of ``seeds`` whose perplexity windows were laid out otherwise (:func:`check_ppl_windows`; its
    ``"run"`` settings), then record :data:`PPL_BOS_WINDOWS` in the ``"run"`` settings of ``records`` (the seed
    records about to be written) where the windows open with BOS."""
    bos = ppl_bos_windows(tok, ppl_text)
    for seed in seeds:
        path = seed_file(out, seed)
        if path.exists():
            check_ppl_windows(path, read_json(path).get("run", {}), bos)
    for record in records:
        if bos:
            record["run"] = dict(record["run"], **{PPL_BOS_WINDOWS: True})


def check_one_ppl_layout(records: Mapping[Union[str, Path], Mapping[str, Any]]) -> None:
    """Refuse a table of seed files (``{path: record}``) whose perplexity windows were laid out in more than one way
    (:data:`PPL_BOS_WINDOWS` in each record's ``"run"``; absent: as tokenized), such as a seed scored before the key
    beside one scored after it; raises :class:`BenchConfigError` naming a file of each layout."""
    layouts: Dict[bool, Union[str, Path]] = {}
    for path, record in records.items():
        layouts.setdefault(bool(record.get("run", {}).get(PPL_BOS_WINDOWS, False)), path)
    if len(layouts) > 1:
        raise BenchConfigError(f"{layouts[False]} and {layouts[True]} hold perplexities of two window layouts "
                               f"({PPL_BOS_WINDOWS}: False there, True in the second: windows opening with BOS); one "
                               "table cannot mix them: rerun the first into another --out, or remove it")


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
