"""Dataset loaders turning benchmark files into :class:`UnlearnCase` objects.

Use :func:`load_cases` (by name: ``counterfact``, ``counterfact-easyedit``, ``zsre``,
``zsre-knowedit``, ``mquake``, ``rwku``; or by path with ``format=``). Probe answers carry
no leading space; scorers join ``prompt + " " + answer``.
"""
from __future__ import annotations

from .counterfact import load_counterfact_easyedit, load_counterfact_rome
from .mquake import load_mquake
from .registry import DATASETS, dataset_names, default_data_dir, detect_format, load_cases, sample_cases
from .rwku import cloze_to_prompt, load_rwku
from .types import DataFormatError, Probe, UnlearnCase
from .zsre import load_zsre_knowedit, load_zsre_mend

__all__ = [
    "DATASETS",
    "DataFormatError",
    "Probe",
    "UnlearnCase",
    "cloze_to_prompt",
    "dataset_names",
    "default_data_dir",
    "detect_format",
    "load_cases",
    "load_counterfact_easyedit",
    "load_counterfact_rome",
    "load_mquake",
    "load_rwku",
    "load_zsre_knowedit",
    "load_zsre_mend",
    "sample_cases",
]
