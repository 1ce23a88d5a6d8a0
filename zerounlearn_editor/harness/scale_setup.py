"""What a scale run knows before the model loads (:func:`prepare_run`: the YAMLs, the case pool, the stored files
checked) and after (:func:`load_setup`: the model, its fingerprint, the perplexity settings and the ``C0``
statistics), and one measured edit (:func:`edit_once`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch import nn

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.engine.hparams import EditHyperParams
from zerounlearn_editor.engine.pipeline import EditReport
from zerounlearn_editor.engine.stats import SecondMoment, StatsRequest, cached_second_moments
from zerounlearn_editor.engine.targets import NeutralTargets
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.case_scoring import ScoringSettings, model_metrics, ppl_token_count
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.harness.scale_config import ScaleConfig, ppl_text_of
from zerounlearn_editor.harness.scale_cost import measure
from zerounlearn_editor.harness.scale_rows import record_tag, run_settings, yaml_tag
from zerounlearn_editor.harness.stages import Stage
from zerounlearn_editor.harness.stored_settings import (
    PPL_BOS_WINDOWS,
    check_ppl_windows,
    hparams_identity,
    ppl_bos_windows,
    refuse_other_settings,
    settings_differences,
)
from zerounlearn_editor.support.files import read_json, sha256_of_json

__all__ = ["ScaleRun", "prepare_run", "ScaleSetup", "load_setup", "perplexity", "edit_once", "record_head"]


def _load_method(path: str) -> Tuple[EditHyperParams, Callable[..., Any]]:
    """``(hparams, apply function)`` of a registered method's YAML (by its ``alg_name``)."""
    from zerounlearn_editor.engine.hparams import HParamsError
    from zerounlearn_editor.methods.registry import load_method

    try:
        return load_method(path)
    except HParamsError as exc:
        raise BenchConfigError(f"bench-scale: {exc}") from None


def _load_method_apply(hp: EditHyperParams) -> Callable[..., Any]:
    """The registered apply function of ``hp``'s method (:mod:`zerounlearn_editor.methods.registry`)."""
    from zerounlearn_editor.methods.registry import get_method

    return get_method(hp.alg_name).apply


@dataclass
class ScaleRun:
    """What a run knows before the model loads: the YAMLs (hyperparameters, tags), the case pool, the settings
    every stored row or stream of ``out`` must share (:func:`~zerounlearn_editor.harness.scale_rows.run_settings`)
    and per tag its YAML's content hash and that of the retain file it names (``None``: it names none)."""

    hps: List[EditHyperParams]
    tags: List[str]
    pool: List[UnlearnCase]
    settings: Dict[str, Any]
    hparams_sha256: Dict[str, str]
    retain_file_sha256: Dict[str, Optional[str]] = dataclasses.field(default_factory=dict)

    def row_settings(self, tag: str) -> Dict[str, Any]:
        """The settings a row or stream of ``tag`` is keyed by: the run's, its YAML's content hash and, when the
        YAML names a ``retain_file`` (which the edit reads), that file's content hash."""
        retain = self.retain_file_sha256.get(tag)
        return dict(self.settings, hparams_sha256=self.hparams_sha256[tag],
                    **({"retain_file_sha256": retain} if retain else {}))


def prepare_run(config: ScaleConfig, stored: str) -> ScaleRun:
    """Validate ``config``, load the YAMLs and the cases, and refuse (before the model loads) when a stored file of
    ``out`` matching the glob ``stored`` (batch rows or stream folders) was made with other settings."""
    config.validate()
    hps = [_load_method(p)[0] for p in config.hparams]
    tags = [yaml_tag(p) for p in config.hparams]
    for index, tag in enumerate(tags):
        if tag in tags[:index]:
            raise BenchConfigError(f"bench-scale: {config.hparams[tags.index(tag)]} and {config.hparams[index]} "
                                   f"share the file-name tag {tag!r} (folder and stem); rename one")
    with Stage(f"loading {config.data} cases"):
        pool = load_cases(config.data, path=config.data_path)
    identities = {tag: hparams_identity(path, getattr(hp, "retain_file", None))
                  for tag, path, hp in zip(tags, config.hparams, hps)}
    run = ScaleRun(hps, tags, pool, run_settings(config, pool, str(hps[0].model_name)),
                   {tag: identity["sha256"] for tag, identity in identities.items()},
                   {tag: identity["retain_file"]["sha256"] if "retain_file" in identity else None
                    for tag, identity in identities.items()})
    for path in sorted(Path(config.out).glob(stored)):
        record = read_json(path)
        if "settings" not in record:
            refuse_other_settings(path, ["settings: not recorded there (written before bench-scale recorded them)"])
        tag = path.parent.name if path.name == "stream.json" else record_tag(record)
        wanted = run.row_settings(tag) if tag in run.hparams_sha256 else run.settings
        refuse_other_settings(path, settings_differences(record["settings"], wanted))
    return run


@dataclass
class ScaleSetup:
    """What a run holds once the model is loaded: the model and tokenizer, the YAMLs' hyperparameters, the ``C0``
    statistics by module template and layer, the unedited model's fingerprint, the perplexity settings, the unedited
    perplexity (measured once, when first needed) and the perplexity tokens the text gives."""

    model: nn.Module
    tok: Any
    hps: List[EditHyperParams]
    moments: Dict[str, Dict[int, SecondMoment]]  # module template -> layer -> C0
    fingerprint: ModelFingerprint
    settings: ScoringSettings
    base_ppl: Optional[float] = None
    ppl_tokens: Optional[int] = None  # the perplexity tokens measured (the text may hold fewer than --ppl-tokens)
    ppl_bos_windows: bool = False  # every perplexity window opens with BOS (stored_settings.ppl_bos_windows)

    @property
    def model_sha256(self) -> str:
        """SHA-256 of the unedited model's parameter digests: the weights' identity (the name is in the settings)."""
        return sha256_of_json(self.fingerprint.digests)


def load_setup(config: ScaleConfig, hps: List[EditHyperParams], model=None, tok=None, stored: str = "") -> ScaleSetup:
    """Load the model (unless given), check the perplexity text, fingerprint the model and refuse a stored file of
    ``out`` matching the glob ``stored`` made on other weights under the same name, then the ``C0`` statistics."""
    main = hps[0]
    for hp, path in zip(hps[1:], config.hparams[1:]):
        for key in ("model_name", "mom2_dataset", "mom2_n_samples", "mom2_dtype", "mom2_max_length"):
            if getattr(hp, key) != getattr(main, key):
                raise BenchConfigError(
                    f"bench-scale: {path}: {key} differs from {config.hparams[0]}'s; run it separately"
                )
    if model is None:
        from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

        with Stage(f"loading model {main.model_name}"):
            model, tok = load_model_and_tokenizer(str(main.model_name), config.device)
    ppl_text = ppl_text_of(config)
    settings = ScoringSettings(config.eval_batch_size, ppl_text, config.ppl_tokens)
    measured = ppl_token_count(tok, settings)
    if measured is not None and measured < 2:
        raise BenchConfigError(f"bench-scale: the perplexity text {ppl_text} gives {measured} token(s); perplexity "
                               "needs at least 2 (--ppl-tokens >= 2 and a longer --ppl-text, or --ppl-tokens 0)")
    loaded = ScaleSetup(model, tok, hps, {}, ModelFingerprint.of(model), settings, ppl_tokens=measured,
                        ppl_bos_windows=ppl_bos_windows(tok, ppl_text))
    for path in sorted(Path(config.out).glob(stored)) if stored else []:
        record = read_json(path)
        refuse_other_settings(path, settings_differences(record, {"model_sha256": loaded.model_sha256}))
        check_ppl_windows(path, record, loaded.ppl_bos_windows)
    wanted: Dict[str, set] = {}
    for hp in hps:
        wanted.setdefault(hp.rewrite_module_tmp, set()).update(hp.layers)
    moments = {}
    for template, layers in wanted.items():
        with Stage(f"C0 statistics for layers {sorted(layers)}"):
            request = StatsRequest.of_hparams(main, layers=sorted(layers), module_tmp=template, progress=False)
            moments[template] = cached_second_moments(model, tok, request)
    return dataclasses.replace(loaded, moments=moments)


def perplexity(setup: ScaleSetup) -> Optional[float]:
    """The model's perplexity on the run's text as it is now (``None`` without a perplexity text)."""
    return model_metrics(setup.model, setup.tok, [], setup.settings)["ppl"]


def edit_once(
    setup: ScaleSetup, hp: EditHyperParams, requests: List[Dict[str, Any]], targets: Optional[NeutralTargets]
):
    """One edit (targets optimised inside when ``targets`` is None); returns ``(weights_copy, details, cost)``."""
    report = EditReport()
    moments = {layer: setup.moments[hp.rewrite_module_tmp][layer] for layer in hp.layers}
    meter = measure()
    with meter as cost:
        _, weights_copy = _load_method_apply(hp)(
            setup.model, setup.tok, requests, hp, return_orig_weights=True, second_moments=moments, progress=False,
            report=report, targets=targets, fluency_guard="warn")
    meter.stage_peaks(report)
    details = {
        "timings": dict(report.timings),
        "target_steps_mean": fmean(report.target_steps) if report.target_steps else None,
        "target_nll_mean": fmean(report.target_nll) if report.target_nll else None,
        "layer_change_norm": {str(k): v for k, v in report.layer_change_norm.items()},
        **({"fluency_guard": report.fluency} if report.fluency else {}),
    }
    return weights_copy, details, cost


def record_head(config: ScaleConfig, run: ScaleRun, setup: ScaleSetup, tag: str) -> Dict[str, Any]:
    """What a batch row or a stream's ``stream.json`` records of its run: the YAML (path, tag), the data, the
    perplexity tokens measured, the known threshold, the settings it is keyed by (:meth:`ScaleRun.row_settings`),
    the model's weights and, where its perplexity windows open with BOS, :data:`PPL_BOS_WINDOWS`."""
    return {
        "hparams": config.hparams[run.tags.index(tag)],
        "tag": tag,
        "data": config.data,
        "data_path": config.data_path,
        "ppl_tokens": setup.ppl_tokens,
        "known_min_accuracy": config.known_min_accuracy,
        "settings": run.row_settings(tag),
        "model_sha256": setup.model_sha256,
        **({PPL_BOS_WINDOWS: True} if setup.ppl_bos_windows else {}),
    }
