"""Several bench runs from one YAML file (``zerounlearn bench --runfile runs.yaml``).

::

    runs:
      - name: counterfact-smollm2
        hparams: hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml
        data: counterfact
        n: 50
        seeds: 1-10            # or [1, 2, 3] or 7
        methods: base,GA,NPO,ZeroUnlearn,ZeroUnlearn-GD   # or a list
        out: results/counterfact_smollm2
        ppl_tokens: 20000      # optional (default 20000)

Required keys per run: ``name, hparams, data, n, seeds, methods, out``; optional:
``ppl_tokens, ppl_text, fluency, fluency_tokens, method_hparams`` (a mapping method -> YAML),
``data_path, device, known_only, known_min_accuracy, retain, group_generation``. Loading is strict: an unknown key (at
the top or in a run) is an
error naming the key, the run and the file. Paths are relative to the working directory, as
on the command line. Runs that name the same model and device share one loaded model.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Tuple, Union

from zerounlearn_editor.harness.bench_config import (
    DEFAULT_PPL_TOKENS,
    BenchConfig,
    BenchConfigError,
    parse_method_hparams,
    parse_seeds,
)
from zerounlearn_editor.support.structured_files import read_structured

__all__ = ["RUN_REQUIRED_KEYS", "RUN_OPTIONAL_KEYS", "load_runfile", "run_runfile"]

LOG = logging.getLogger(__name__)

RUN_REQUIRED_KEYS = ("name", "hparams", "data", "n", "seeds", "methods", "out")
RUN_OPTIONAL_KEYS = (
    "ppl_tokens",
    "ppl_text",
    "fluency",
    "fluency_tokens",
    "method_hparams",
    "data_path",
    "device",
    "known_only",
    "retain",
    "known_min_accuracy",
    "group_generation",
)


def _expect(value: Any, kinds: Union[type, Tuple[type, ...]], key: str, where: str) -> Any:
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise BenchConfigError(f"{where}: key {key!r} has value {value!r} of the wrong type")
    if not isinstance(value, kinds):
        raise BenchConfigError(f"{where}: key {key!r} has value {value!r} of the wrong type")
    return value


def _run_config(raw: Any, index: int, path: Path) -> BenchConfig:
    where = f"{path}: run {index}"
    if not isinstance(raw, dict):
        raise BenchConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    if isinstance(raw.get("name"), str):
        where = f"{path}: run {index} ({raw['name']})"
    unknown = sorted(set(raw) - set(RUN_REQUIRED_KEYS) - set(RUN_OPTIONAL_KEYS))
    if unknown:
        raise BenchConfigError(
            f"{where}: unknown key(s) {unknown}; allowed: {', '.join(RUN_REQUIRED_KEYS + RUN_OPTIONAL_KEYS)}"
        )
    missing = [k for k in RUN_REQUIRED_KEYS if k not in raw]
    if missing:
        raise BenchConfigError(f"{where}: missing key(s) {missing}")
    methods = raw["methods"]
    if isinstance(methods, list):
        methods = [str(_expect(m, str, "methods", where)) for m in methods]
    else:
        methods = [m.strip() for m in str(_expect(methods, str, "methods", where)).split(",") if m.strip()]
    try:
        seeds = parse_seeds(_expect(raw["seeds"], (str, int, list), "seeds", where))
    except BenchConfigError as exc:
        raise BenchConfigError(f"{where}: {exc}") from None
    n = raw["n"]
    if n is not None:
        _expect(n, int, "n", where)
    method_hparams = raw.get("method_hparams") or {}
    _expect(method_hparams, dict, "method_hparams", where)
    config = BenchConfig(
        name=str(_expect(raw["name"], str, "name", where)),
        hparams=str(_expect(raw["hparams"], str, "hparams", where)),
        data=str(_expect(raw["data"], str, "data", where)),
        n=n,
        seeds=seeds,
        methods=methods,
        out=str(_expect(raw["out"], str, "out", where)),
        ppl_tokens=int(_expect(raw.get("ppl_tokens", DEFAULT_PPL_TOKENS), int, "ppl_tokens", where)),
        ppl_text=raw.get("ppl_text") and str(_expect(raw["ppl_text"], str, "ppl_text", where)),
        fluency=bool(_expect(raw.get("fluency", False), bool, "fluency", where)),
        fluency_tokens=int(_expect(raw.get("fluency_tokens", 32), int, "fluency_tokens", where)),
        known_only=bool(_expect(raw.get("known_only", False), bool, "known_only", where)),
        retain=_expect(raw.get("retain"), (str, type(None)), "retain", where),
        known_min_accuracy=float(
            _expect(raw.get("known_min_accuracy", 1.0), (int, float), "known_min_accuracy", where)
        ),
        method_hparams=parse_method_hparams(method_hparams),
        data_path=raw.get("data_path") and str(_expect(raw["data_path"], str, "data_path", where)),
        device=str(_expect(raw.get("device", "cpu"), str, "device", where)),
        group_generation=bool(_expect(raw.get("group_generation", False), bool, "group_generation", where)),
    )
    try:
        config.validate()
    except BenchConfigError as exc:
        raise BenchConfigError(f"{where}: {exc}") from None
    return config


def load_runfile(path: Union[str, Path]) -> List[BenchConfig]:
    """The runs of a run file, strictly checked (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"run file not found: {path}")
    data = read_structured(path, "the run file", lambda message: BenchConfigError(f"{path}: {message}"), suffix=".yaml")
    if not isinstance(data, dict):
        raise BenchConfigError(f"{path}: expected a mapping with key 'runs'")
    unknown = sorted(set(data) - {"runs"})
    if unknown:
        raise BenchConfigError(f"{path}: unknown top-level key(s) {unknown}; only 'runs' is allowed")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        raise BenchConfigError(f"{path}: key 'runs' must be a non-empty list of runs")
    configs = [_run_config(raw, index, path) for index, raw in enumerate(runs)]
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BenchConfigError(f"{path}: run name(s) {duplicates} used more than once")
    return configs


def run_runfile(path: Union[str, Path], progress: bool = True) -> List[Dict[str, Any]]:
    """Run every run of the file in order; returns their summaries.

    Runs naming the same model and device reuse the loaded model (at most one is kept).
    """
    from zerounlearn_editor.harness.runner import run_bench
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    configs = load_runfile(path)
    loaded: Dict[Tuple[str, str], Tuple[Any, Any]] = {}

    def loader(model_name: str, device: str) -> Tuple[Any, Any]:
        key = (model_name, device)
        if key not in loaded:
            loaded.clear()
            loaded[key] = load_model_and_tokenizer(model_name, device=device)
        return loaded[key]

    summaries = []
    for config in configs:
        config.progress = progress
        LOG.info("run %s -> %s", config.name, config.out)
        summaries.append(run_bench(config, loader=loader))
    return summaries
