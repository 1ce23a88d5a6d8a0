"""Dataset registry (:data:`DATASETS`: name -> loader and default path under the data directory) and
:func:`load_cases`. Data directory: ``data_dir``, else ``$ZEROUNLEARN_DATA_DIR``, else ``../shared/data``
relative to the working directory, else ``../shared/data`` beside the repository holding this package.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Union

from zerounlearn_editor.data.counterfact import load_counterfact_easyedit, load_counterfact_rome
from zerounlearn_editor.data.mquake import load_mquake
from zerounlearn_editor.data.records import read_json_records
from zerounlearn_editor.data.rwku import RWKU_GROUPS, load_rwku
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.data.zsre import load_zsre_knowedit, load_zsre_mend
from zerounlearn_editor.support.resources import data_dir_candidates, missing_data_message, shared_data_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset format: its loader and default path under the data directory."""

    loader: Callable[..., List[UnlearnCase]]
    default_path: str


DATASETS: Dict[str, DatasetSpec] = {
    "counterfact": DatasetSpec(load_counterfact_rome, "counterfact/counterfact_rome_1129.json"),
    "counterfact-easyedit": DatasetSpec(
        load_counterfact_easyedit, "counterfact/counterfact_easyedit_val_1919.json"
    ),
    "zsre": DatasetSpec(load_zsre_mend, "zsre/zsre_mend_eval_1037.json"),
    "zsre-knowedit": DatasetSpec(load_zsre_knowedit, "zsre/knowedit_zsre_test_1301.json"),
    "mquake": DatasetSpec(load_mquake, "mquake/MQuAKE-hard_429.json"),
    "rwku": DatasetSpec(load_rwku, "rwku"),
}


def default_data_dir() -> Path:
    """:func:`.resources.shared_data_dir`, else the last folder of :func:`.resources.data_dir_candidates`."""
    return shared_data_dir() or data_dir_candidates()[-1][0]


def detect_format(path: Union[str, Path]) -> str:
    """The registered format of a user's file (or RWKU directory), from its fields; ``ValueError`` if none."""
    path = Path(path)
    if path.is_dir():
        if any((path / f"{group}.json").is_file() for group in RWKU_GROUPS):
            return "rwku"
        raise ValueError(f"{path}: directory holds no RWKU level files")
    records = read_json_records(path)
    if not records:
        raise ValueError(f"{path}: empty file, pass format= explicitly")
    keys = set(records[0])
    rules = [
        ("mquake", {"single_hops"}),
        ("counterfact", {"requested_rewrite", "paraphrase_prompts", "neighborhood_prompts"}),
        ("counterfact-easyedit", {"prompt", "rephrase_prompt", "locality_prompt"}),
        ("zsre", {"src", "answers", "loc", "loc_ans"}),
        ("zsre-knowedit", {"prompt", "ground_truth", "locality"}),
    ]
    for name, required in rules:
        if required <= keys:
            return name
    raise ValueError(f"{path}: cannot recognise the data format from fields {sorted(keys)}; pass format=")


def sample_cases(cases: List[UnlearnCase], n: Optional[int], seed: int = 0) -> List[UnlearnCase]:
    """``n`` cases drawn by ``random.Random(seed).sample`` (all, in file order, when ``n`` is None)."""
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n is not None and n > len(cases):
        logger.warning("asked for %d cases, only %d available; using all", n, len(cases))
    if n is None or n >= len(cases):
        return list(cases)
    return random.Random(seed).sample(cases, n)


def load_cases(
    name_or_path: Union[str, Path],
    path: Union[str, Path, None] = None,
    n: Optional[int] = None,
    seed: int = 0,
    data_dir: Union[str, Path, None] = None,
    format: Optional[str] = None,  # noqa: A002 - the user-facing name
) -> List[UnlearnCase]:
    """``n`` cases (all, in file order, when ``None``; drawn with ``seed``) of a dataset of :data:`DATASETS`
    (read from ``path``, else from its default path under ``data_dir``) or of a data file (an RWKU
    directory) whose ``format`` is guessed from its fields when not given.
    """
    key = str(name_or_path)
    if key in DATASETS:
        fmt = key
        if format is not None and format != key:
            raise ValueError(f"format={format!r} contradicts dataset name {key!r}")
        relative = DATASETS[key].default_path
        base = Path(data_dir) if data_dir is not None else default_data_dir()
        file_path = Path(path) if path is not None else base / relative
        if path is None and not file_path.exists():
            if data_dir is not None:
                raise FileNotFoundError(f"dataset {key!r}: {file_path} not found (data_dir={data_dir})")
            raise FileNotFoundError(f"dataset {key!r}: {missing_data_message(relative)}")
    else:
        file_path = Path(name_or_path)
        if not file_path.exists():
            names = ", ".join(DATASETS)
            raise ValueError(f"{key!r} is neither a dataset name ({names}) nor an existing path")
        fmt = format if format is not None else detect_format(file_path)
        if fmt not in DATASETS:
            raise ValueError(f"unknown format {fmt!r}; known: {', '.join(DATASETS)}")
    cases = DATASETS[fmt].loader(file_path, source=fmt)
    logger.info("loaded %d %s cases from %s", len(cases), fmt, file_path)
    return sample_cases(cases, n, seed)
