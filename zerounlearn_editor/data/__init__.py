"""Dataset loaders turning benchmark files into :class:`UnlearnCase` objects: :func:`load_cases` by name
(:data:`DATASETS`) or by path (``format=``)."""
from __future__ import annotations

from zerounlearn_editor.data.counterfact import load_counterfact_easyedit, load_counterfact_rome
from zerounlearn_editor.data.mquake import load_mquake
from zerounlearn_editor.data.datasets import (
    DATASETS, default_data_dir, detect_format, load_cases, sample_cases,
)
from zerounlearn_editor.data.rwku import cloze_to_prompt, load_rwku
from zerounlearn_editor.data.types import DataFormatError, Probe, UnlearnCase
from zerounlearn_editor.data.zsre import load_zsre_knowedit, load_zsre_mend

__all__ = [
    "DATASETS", "DataFormatError", "Probe", "UnlearnCase", "cloze_to_prompt", "default_data_dir",
    "detect_format", "load_cases", "load_counterfact_easyedit", "load_counterfact_rome", "load_mquake",
    "load_rwku", "load_zsre_knowedit", "load_zsre_mend", "sample_cases",
]
