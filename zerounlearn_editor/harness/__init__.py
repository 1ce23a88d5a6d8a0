"""The measurement harness behind ``zerounlearn bench``, ``bench-scale``, ``bench-speed``, ``audit``, ``utility``,
``trace`` and ``pca``; first of all the bench: one command turns an hparams YAML and a dataset into the paper's table.

``run_bench(BenchConfig(...))`` (or ``zerounlearn bench ...``) edits ``n`` sampled cases per
seed with every method, scores efficacy / generalization / specificity / perplexity before
and after, restores the model bit-exactly between methods and writes ``seed_<k>.json``,
``summary.json`` and ``summary.md``. See :mod:`.runner` for the procedure, :mod:`.method_specs`
for the method interface and :mod:`.runfile` for several runs in one YAML file.
"""
from __future__ import annotations

from zerounlearn_editor.harness.bench_config import (
    BenchConfig,
    BenchConfigError,
    default_methods,
    parse_method_hparams,
    parse_methods,
    parse_seeds,
)
from zerounlearn_editor.harness.method_rows import default_registry
from zerounlearn_editor.harness.method_specs import (
    EditOutcome,
    HParamsLookup,
    MethodContext,
    MethodSpec,
    PreparedMethod,
    SharedTargets,
)
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint, ModelStateError
from zerounlearn_editor.harness.report import format_table
from zerounlearn_editor.harness.runfile import load_runfile, run_runfile
from zerounlearn_editor.harness.runner import run_bench

__all__ = [
    "BenchConfig",
    "BenchConfigError",
    "default_methods",
    "EditOutcome",
    "HParamsLookup",
    "MethodContext",
    "MethodSpec",
    "ModelFingerprint",
    "ModelStateError",
    "PreparedMethod",
    "SharedTargets",
    "default_registry",
    "format_table",
    "load_runfile",
    "parse_method_hparams",
    "parse_methods",
    "parse_seeds",
    "run_bench",
    "run_runfile",
]
