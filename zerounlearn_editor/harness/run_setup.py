"""The setup the bench (:mod:`.runner`) and the audit (:mod:`.audit`) share: the methods to run with their
hyperparameter lookup and signatures, the model load, and the prepared methods with their statistics.

A method's signature is the hash of its model-free ``describe`` (files and their hashes): a stored result is
reused on resume only under the same signature. ``base`` (the unedited model) has a fixed one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from torch import nn

from zerounlearn_editor.harness.bench_config import BenchConfigError, parse_methods
from zerounlearn_editor.harness.method_rows import default_registry
from zerounlearn_editor.harness.method_specs import (
    HParamsLookup,
    MethodContext,
    MethodSpec,
    PreparedMethod,
    StatsBank,
    known_method_names,
    load_main_hparams,
)
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.harness.stages import Stage, compute_statistics
from zerounlearn_editor.support.files import sha256_of_json

__all__ = ["BASE_SIGNATURE", "ModelLoader", "MethodSetup", "PreparedRun", "setup_methods", "load_model",
           "prepare_run"]

BASE_SIGNATURE = sha256_of_json({"method": "base"})
"""The signature of the unedited model's results."""

ModelLoader = Callable[[str, str], Tuple[nn.Module, Any]]
"""``(model_name, device) -> (model, tok)`` (also called with a third argument, the dtype, when one is set)."""


@dataclass
class MethodSetup:
    """The methods of a run: ``names`` (``base`` included when asked), the registry, the hparams lookup, and per
    name its ``describe`` output and signature (``base``: ``{}`` and :data:`BASE_SIGNATURE`)."""

    names: List[str]
    registry: Dict[str, MethodSpec]
    lookup: HParamsLookup
    descriptions: Dict[str, Dict[str, Any]]
    signatures: Dict[str, str]


def setup_methods(methods: Union[str, Sequence[str]], method_hparams: Mapping[str, str], hparams: str,
                  registry: Optional[Mapping[str, MethodSpec]] = None, what: str = "") -> MethodSetup:
    """Parse ``methods`` against ``registry`` (default :func:`default_registry`), load the main ``hparams`` and
    describe every method (model-free). ``what`` prefixes the errors (``"audit: "``)."""
    specs = dict(registry) if registry is not None else default_registry()
    names = parse_methods(methods, known_method_names(specs))
    unknown = sorted(set(method_hparams) - set(specs))
    if unknown:
        raise BenchConfigError(f"{what}method hparams given for unknown method(s) {unknown}")
    lookup = HParamsLookup(Path(hparams), load_main_hparams(str(hparams)), dict(method_hparams))
    descriptions = {name: specs[name].describe(lookup) for name in names if name != "base"}
    signatures = {name: sha256_of_json(desc) for name, desc in descriptions.items()}
    signatures["base"] = BASE_SIGNATURE
    descriptions["base"] = {}
    return MethodSetup(names, specs, lookup, descriptions, signatures)


def load_model(loader: Optional[ModelLoader], name: str, device: str, dtype: Optional[str]) -> Tuple[nn.Module, Any]:
    """``loader(name, device)`` (default :func:`~zerounlearn_editor.support.model_zoo.load_model_and_tokenizer`),
    with ``dtype`` when one is set."""
    if loader is None:
        from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer as loader
    with Stage(f"loading model {name}"):
        if dtype is None:
            return loader(name, device)
        return loader(name, device, dtype)  # type: ignore[call-arg]


@dataclass
class PreparedRun:
    """The unedited model's fingerprint, the prepared methods by name and the statistics bank they need."""

    fingerprint: ModelFingerprint
    prepared: Dict[str, PreparedMethod]
    bank: StatsBank


def prepare_run(setup: MethodSetup, model: nn.Module, tok: Any, out: Path, needed: Sequence[str],
                progress: bool, before_statistics: Optional[Callable[[], None]] = None) -> PreparedRun:
    """Fingerprint ``model``, prepare the ``needed`` methods (``base`` is skipped) and compute their statistics;
    ``before_statistics`` runs between the two (checks that must fail before the statistics pass)."""
    with Stage("fingerprinting the unedited model"):
        fingerprint = ModelFingerprint.of(model)
    neutral = setup.lookup.main.neutral_target or tok.eos_token or ""
    context = MethodContext(setup.lookup, model, tok, Path(out), neutral)
    names = [name for name in dict.fromkeys(needed) if name != "base"]
    with Stage(f"preparing {len(names)} method(s)"):
        prepared = {name: setup.registry[name].prepare(context) for name in names}
    if before_statistics is not None:
        before_statistics()
    bank = compute_statistics(model, tok, setup.lookup, list(prepared.values()), progress)
    return PreparedRun(fingerprint, prepared, bank)
