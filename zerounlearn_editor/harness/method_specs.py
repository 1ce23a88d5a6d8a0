"""The methods a bench compares, behind one interface.

A :class:`MethodSpec` has two steps:

* ``describe(lookup)``: model-free, says which configuration the method will use (files and
  their hashes). Its hash decides whether a stored result is still valid on resume.
* ``prepare(context)``: loads the hyperparameters for the loaded model and returns a
  :class:`PreparedMethod`, whose ``edit`` changes the model in place and returns the original
  values of every parameter it changed (EasyEdit's ``weights_copy``), or which carries a
  ``skip_reason`` when the method cannot run here (e.g. EasyEdit is not importable).

The retain-aware row ``ZeroUnlearn-GD+R`` reads ``hparams/ZeroUnlearn-GD/<stem>-retain.yaml``
and receive the seed's retain set (``PreparedMethod.uses_retain``; see :mod:`.retain_sets`). A bench-only row
(a ``row_variants`` suffix mapped to ``None``) has no shipped YAML: its file comes from
``--method-hparams <row>=PATH``. A method's rows are its registry entry's ``row_variants``.

The methods are those of :mod:`zerounlearn_editor.methods.registry` (editing methods and the baselines GA/NPO),
each run with its registered ``apply`` function. Hyperparameters: every registered method reads
``hparams/<folder>/<file>``,
``<file>`` being the main ``--hparams`` file's name (looked up beside the main file's folder,
then in the checkout); ``method_hparams`` overrides the path. The main file itself serves its
own method. Statistics ``C0`` are computed once by the runner with the main file's settings
and handed to every method that needs them.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.hparams import EditHyperParams, HParamsError, load_config_file
from zerounlearn_editor.engine.pipeline import EditReport, neutral_targets, target_settings
from zerounlearn_editor.engine.stats import SecondMoment, corpus_cache_name
from zerounlearn_editor.engine.targets import NeutralTargets
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.stored_settings import hparams_identity
from zerounlearn_editor.methods.baselines import TrainReport
from zerounlearn_editor.methods.registry import RETAIN_ROW, MethodEntry, UnknownMethodError, get_method
from zerounlearn_editor.support.files import file_identity, sha256_of_json
from zerounlearn_editor.support.resources import hparams_path

__all__ = [
    "StatsBank",
    "SharedTargets",
    "EditOutcome",
    "PreparedMethod",
    "HParamsLookup",
    "MethodContext",
    "MethodSpec",
    "load_main_hparams",
    "edit_method_spec",
    "baseline_spec",
]

LOG = logging.getLogger(__name__)

StatsBank = Dict[str, Dict[int, SecondMoment]]
"""Second moments by module template, then layer: ``{rewrite_module_tmp: {layer: C0 sums}}``."""


@dataclass
class EditOutcome:
    """What an edit returned: original values of the changed parameters and JSON-able details."""

    weights_copy: Dict[str, torch.Tensor]
    details: Dict[str, Any] = field(default_factory=dict)


EditFn = Callable[..., EditOutcome]
"""``(model, tok, requests, stats) -> EditOutcome``; edits ``model`` in place. Methods with
``uses_retain`` also take ``retain=`` (the seed's retain requests)."""


@dataclass
class PreparedMethod:
    """A method ready to edit the loaded model (or the reason it cannot)."""

    name: str
    edit: Optional[EditFn] = None
    hparams: Dict[str, Any] = field(default_factory=dict)
    stats_layers: Tuple[int, ...] = ()
    stats_module_tmp: Optional[str] = None
    skip_reason: Optional[str] = None
    uses_retain: bool = False


def load_main_hparams(path: str) -> EditHyperParams:
    """The main hparams file (the YAML of a registered editing method, e.g. ZeroUnlearn-GD), strictly loaded."""
    alg = load_config_file(path).get("alg_name")
    try:
        entry = get_method(alg, f"{path}: key 'alg_name' (the bench's main hparams)")
    except UnknownMethodError as exc:
        raise HParamsError(str(exc)) from None
    return entry.hparams_class.from_hparams(path)


def _stem_candidates(stem: str) -> List[str]:
    """``stem`` and its shorter forms at ``-`` boundaries, longest first: a main file of a variant
    (``SmolLM2-135M-Instruct-retain``) finds another method's plain file (``SmolLM2-135M-Instruct``)."""
    parts = stem.split("-")
    return ["-".join(parts[:k]) for k in range(len(parts), 0, -1)]


@dataclass
class HParamsLookup:
    """Where each method's hyperparameters come from (see the module docstring)."""

    main_path: Path
    main: EditHyperParams
    overrides: Mapping[str, str] = field(default_factory=dict)

    def path_for(self, method: str, folder: Optional[str] = None, variant: Optional[str] = "") -> Path:
        """The YAML of ``method``; raises :class:`BenchConfigError` listing where it looked.

        ``folder`` is the hparams folder (default: the method name) and ``variant`` a suffix of
        the file stem (``GA-full`` reads ``hparams/GA/<stem>-full.yaml``); ``None``: a bench-only row, whose
        file only ``--method-hparams`` gives.
        """
        folder = folder or method
        if method in self.overrides:
            path = Path(self.overrides[method])
            if not path.is_file():
                raise BenchConfigError(f"method hparams for {method}: file not found: {path}")
            return path
        if variant is None:
            raise BenchConfigError(f"bench method {method!r} is a bench-only row with no shipped YAML; "
                                   f"pass --method-hparams {method}=PATH")
        if self.main.alg_name == method and not variant:
            return self.main_path
        looked = []
        for stem in _stem_candidates(self.main_path.stem):
            name = f"{stem}{variant}{self.main_path.suffix}"
            sibling = self.main_path.parent.parent / folder / name
            looked.append(str(sibling))
            found: Optional[Path] = sibling if sibling.is_file() else None
            if found is None:
                try:
                    found = Path(hparams_path(folder, f"{stem}{variant}"))
                except FileNotFoundError:
                    looked.append(f"hparams/{folder}/{name}")
            if found is not None:
                if stem != self.main_path.stem:
                    LOG.info("%s: no %s file for %s; using %s", method, self.main_path.stem, method, found)
                return found
        raise BenchConfigError(
            f"no hparams for {method}: looked for {', '.join(looked)}; pass --method-hparams {method}=PATH"
        )

    def override_for(self, method: str) -> Optional[Path]:
        """The override file of ``method``, if one was given."""
        return Path(self.overrides[method]) if method in self.overrides else None

    def statistics_settings(self) -> Dict[str, Any]:
        """The main file's settings that determine ``C0`` (part of every statistics user's identity)."""
        m = self.main
        return {
            "corpus": corpus_cache_name(m.mom2_dataset),
            "mom2_n_samples": m.mom2_n_samples,
            "mom2_dtype": m.mom2_dtype,
            "mom2_max_length": m.mom2_max_length,
        }


class SharedTargets:
    """Neutral targets of the current requests, shared by the methods that need the same ones.

    Keyed by the requests and :func:`~zerounlearn_editor.engine.pipeline.target_settings`; only the
    newest key is kept (a seed's methods run one after another on the same cases), so memory
    does not grow with the number of seeds. Valid because every method starts from the unedited
    model (the runner checks its fingerprint before each method).
    """

    def __init__(self) -> None:
        self._key: Optional[str] = None
        self._targets: Optional[NeutralTargets] = None
        self._seconds = 0.0
        self._owner = ""

    def get_or_compute(
        self, method: str, model: nn.Module, tok: Any, requests: List[Dict[str, Any]], hp: EditHyperParams,
        retain: Optional[List[Dict[str, Any]]] = None,
    ) -> Tuple[NeutralTargets, Dict[str, Any]]:
        """The targets and ``{"target_seconds": s}`` (+ ``"targets_reused_from": method`` if reused).

        ``retain`` (the edit's retain set) plays no part in the targets.
        """
        key = sha256_of_json({"requests": requests, "settings": target_settings(model, hp)})
        if key == self._key and self._targets is not None:
            return self._targets, {"target_seconds": self._seconds, "targets_reused_from": self._owner}
        start = time.perf_counter()
        targets = neutral_targets(model, tok, requests, hp, retain=retain)
        self._key, self._targets, self._seconds, self._owner = key, targets, time.perf_counter() - start, method
        return targets, {"target_seconds": self._seconds}


@dataclass
class MethodContext:
    """What ``prepare`` may use: the lookup, the loaded model/tokenizer and a working folder."""

    lookup: HParamsLookup
    model: nn.Module
    tok: Any
    work_dir: Path
    neutral_target: str
    shared_targets: SharedTargets = field(default_factory=SharedTargets)


@dataclass(frozen=True)
class MethodSpec:
    """A bench method: model-free ``describe`` and model-bound ``prepare`` (see module docstring)."""

    name: str
    describe: Callable[[HParamsLookup], Dict[str, Any]]
    prepare: Callable[[MethodContext], PreparedMethod]


def _split_row(name: str) -> Tuple[str, str]:
    """``("ZeroUnlearn-GD", "+R")`` for the row ``ZeroUnlearn-GD+R``; ``(name, "")`` for a plain method row."""
    family, plus, suffix = name.rpartition("+")
    return (family, plus + suffix) if plus and family else (name, "")


def edit_method_spec(name: str) -> MethodSpec:
    """A registered editing method (:mod:`zerounlearn_editor.methods.registry`), fed the shared statistics.

    ``<method><suffix>`` is a row of the entry's ``row_variants`` (``ZeroUnlearn-GD+R``:
    ``hparams/ZeroUnlearn-GD/<stem>-retain.yaml``, edited with the seed's retain set; a bench-only row, one mapped
    to ``None``: the file of ``--method-hparams``). Only the row
    :data:`~zerounlearn_editor.methods.registry.RETAIN_ROW` receives the retain set. The edit is the entry's own
    ``apply`` function; an unregistered name is an error listing the registered ones.
    """
    family, suffix = _split_row(name)
    entry = get_method(family, "bench method")
    if entry.baseline:
        raise UnknownMethodError(f"bench method {name!r}: {family} is a baseline (use baseline_spec)")
    variant: Optional[str] = ""
    if suffix:
        if suffix not in entry.row_variants:
            known = ", ".join(family + s for s in entry.row_variants) or "none"
            raise UnknownMethodError(f"bench method {name!r}: {family} has no {suffix} row (its rows: {known})")
        variant = entry.row_variants[suffix]
    uses_retain = suffix == RETAIN_ROW
    cls, apply, folder = entry.hparams_class, entry.apply, entry.folder

    def describe(lookup: HParamsLookup) -> Dict[str, Any]:
        path = lookup.path_for(name, folder, variant)
        return {
            "hparams": hparams_identity(path, getattr(cls.from_hparams(path), "retain_file", None)),
            "statistics": lookup.statistics_settings(),
        }

    def prepare(ctx: MethodContext) -> PreparedMethod:
        path = ctx.lookup.path_for(name, folder, variant)
        hp = cls.from_hparams(path)
        main = ctx.lookup.main
        if hp.model_name != main.model_name:
            LOG.warning(
                "%s: model_name %r differs from the main hparams' %r; the bench's model is used",
                path,
                hp.model_name,
                main.model_name,
            )
        stats_keys = ("mom2_dataset", "mom2_n_samples", "mom2_dtype", "mom2_max_length")
        differing = [k for k in stats_keys if getattr(hp, k) != getattr(main, k)]
        if differing:
            LOG.warning(
                "%s: statistics settings %s differ from the main hparams; the shared C0 of the main file is used",
                path,
                differing,
            )

        def edit(model: nn.Module, tok: Any, requests: List[Dict[str, Any]], stats: StatsBank,
                 retain: Optional[List[Dict[str, Any]]] = None) -> EditOutcome:
            moments = {layer: stats[hp.rewrite_module_tmp][layer] for layer in hp.layers}
            report = EditReport()
            targets, reuse = ctx.shared_targets.get_or_compute(name, model, tok, requests, hp,
                                                               retain if uses_retain else None)
            _, weights_copy = apply(
                model, tok, requests, hp, return_orig_weights=True, second_moments=moments, progress=False,
                report=report, targets=targets, retain=retain if uses_retain else None,
                fluency_guard="warn",  # the bench scores perplexity itself; a costly edit is a result, not an error
            )
            details = {
                **{k: v for k, v in reuse.items() if k != "target_seconds"},
                "timings": dict(report.timings, targets=reuse["target_seconds"]),
                "target_nll": list(report.target_nll),
                "layer_change_norm": {str(k): v for k, v in report.layer_change_norm.items()},
                **({"retain_count": report.retain_count} if uses_retain else {}),
                **({"fluency_guard": report.fluency} if report.fluency else {}),
            }
            return EditOutcome(weights_copy, details)

        return PreparedMethod(
            name, edit, hp.to_dict(), stats_layers=tuple(hp.layers), stats_module_tmp=hp.rewrite_module_tmp,
            uses_retain=uses_retain,
        )

    return MethodSpec(name, describe, prepare)


def baseline_spec(entry: MethodEntry, suffix: str = "", variant: Optional[str] = "") -> MethodSpec:
    """The bench row ``<entry.name><suffix>`` of a registered baseline (GA, NPO: fine-tuning, no statistics).

    ``variant`` is the row's YAML stem suffix (``GA-full`` reads ``hparams/GA/<stem>-full.yaml``, ``target_modules:
    all`` in the shipped files); the edit is the entry's ``apply`` with its ``hparams_class``.
    """
    name, cls, apply, folder = entry.name + suffix, entry.hparams_class, entry.apply, entry.folder

    def describe(lookup: HParamsLookup) -> Dict[str, Any]:
        return {"hparams": file_identity(lookup.path_for(name, folder, variant))}

    def prepare(ctx: MethodContext) -> PreparedMethod:
        hp = cls.from_hparams(ctx.lookup.path_for(name, folder, variant))

        def edit(model: nn.Module, tok: Any, requests: List[Dict[str, Any]], stats: StatsBank) -> EditOutcome:
            report = TrainReport()
            _, weights_copy = apply(model, tok, requests, hp, return_orig_weights=True, progress=False, report=report)
            details = {
                "steps": report.steps,
                "final_loss": report.loss[-1] if report.loss else None,
                "reference_logp": float(sum(report.reference_logp) / max(len(report.reference_logp), 1)),
                "final_forget_logp": report.final_forget_logp,
                "trained_parameters": len(report.trained_parameters),
            }
            return EditOutcome(weights_copy, details)

        return PreparedMethod(name, edit, hp.to_dict())

    return MethodSpec(name, describe, prepare)


def known_method_names(registry: Mapping[str, MethodSpec]) -> Sequence[str]:
    """``base`` followed by the registry's names."""
    return ["base", *registry]
