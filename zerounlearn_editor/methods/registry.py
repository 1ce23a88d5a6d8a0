"""The one table of methods: name -> hyperparameter class, apply function, YAML folder, bench rows.

Every consumer reads it: ``zerounlearn unlearn`` / ``demo`` (:func:`load_method`), ``init-hparams``'s
``--method`` choices, ``hparams_doc`` (the README key table, whose ``alg_name`` row lists the methods), the package's
EasyEdit registration (:func:`~zerounlearn_editor.integrations.easyedit.register_with_easyedit`), the bench's
rows, ``--methods`` help and defaults (:func:`~zerounlearn_editor.harness.method_rows.default_registry`) and the
speed bench. A new method is one :func:`register_method` call (here, for a shipped method, or in the method's own
module): no consumer needs editing (the generated README key table and the CLI option pin are regenerated:
CONTRIBUTING.md, "Adding a method"). An unknown name is an error listing the registered ones.

Two kinds of entry: editing methods (``baseline=False``: what ``unlearn``, ``demo``, ``init-hparams``, the speed
bench and EasyEdit run) and comparison baselines (``baseline=True``: GA and NPO, fine-tuning; bench rows only, and
``unlearn`` refuses their YAMLs saying so). The plain listings (:func:`method_names`, :func:`registered_methods`)
give the editing methods; ``baselines=True`` adds the baselines.

The EasyEdit name, the YAML's ``alg_name`` and the registry name are one string
(``BaseEditor`` looks ``hparams.alg_name`` up in ``ALG_DICT``).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Type, Union

from zerounlearn_editor.engine.hparams import (
    BaseHyperParams,
    ConfigFile,
    EditHyperParams,
    HParamsError,
    read_config_file,
)

__all__ = [
    "MethodEntry",
    "RETAIN_ROW",
    "UnknownMethodError",
    "BaselineMethodError",
    "register_method",
    "unregister_method",
    "get_method",
    "load_method",
    "LoadedMethod",
    "read_method",
    "method_names",
    "registered_methods",
    "registered",
]

RETAIN_ROW = "+R"
"""The bench row suffix whose edit receives the seed's retain set (the retain-aware variant)."""

RequestCheck = Callable[[Any, Any, int], None]
"""``(model, hparams, n_requests) -> None``: raises before any scoring when ``n`` requests cannot be edited."""


class UnknownMethodError(HParamsError):
    """A method name (an ``alg_name``, ``--method``) that is not registered."""


class BaselineMethodError(HParamsError):
    """A comparison baseline (``MethodEntry.baseline``) named where only an editing method runs (``unlearn``)."""


@dataclass(frozen=True)
class MethodEntry:
    """One registered method.

    ``name``: the ``alg_name`` of its YAMLs, its EasyEdit ``ALG_DICT`` key and its bench row.
    ``hparams_class``: a :class:`~zerounlearn_editor.engine.hparams.BaseHyperParams` subclass (an
    :class:`~zerounlearn_editor.engine.hparams.EditHyperParams` one for an editing method) whose ``ALG_NAME`` is
    ``name``. ``apply``: the edit in EasyEdit's calling convention ``(model, tok, requests, hparams, copy,
    return_orig_weights, keep_original_weight, **kwargs) -> (model, weights_copy)``; an editing method's accepts the
    pipeline's keywords (``second_moments``, ``targets``, ``report``, ``progress``, ``retain``, ``fluency_guard``,
    ...), a baseline's ``report`` (a ``TrainReport``) and ``progress``. ``yaml_folder``: ``hparams/<folder>/``
    (default ``name``). ``check_requests``: an optional model-bound check run before any scoring (ZeroUnlearn's
    capacity limit). ``adapter_rank_per_fact``: the rank of one weight's change per forgotten fact (the LoRA
    export's bound ``r <= k n``). ``row_variants``: bench row suffix -> YAML stem suffix; the bench also offers the
    row ``<name><row suffix>``, read from ``hparams/<folder>/<stem><stem suffix>.yaml`` (ZeroUnlearn-GD: ``+R`` ->
    ``-retain``; GA: ``-full`` -> ``-full``); a suffix mapped to ``None`` is a bench-only row with no shipped YAML,
    whose file the bench's ``--method-hparams <row>=PATH`` must name. Only the row :data:`RETAIN_ROW` is edited
    with the seed's retain set. ``easyedit_batchable``: EasyEdit's ``batch_edit`` accepts the method.
    ``baseline``: a comparison baseline (GA, NPO): a bench row only; ``unlearn``, ``demo``, ``init-hparams``, the
    speed bench and the EasyEdit registration run the editing methods (``baseline=False``) alone.
    """

    name: str
    hparams_class: Type[EditHyperParams]
    apply: Callable[..., Any]
    yaml_folder: Optional[str] = None
    check_requests: Optional[RequestCheck] = None
    adapter_rank_per_fact: int = 1
    row_variants: Mapping[str, Optional[str]] = field(default_factory=dict)
    easyedit_batchable: bool = True
    baseline: bool = False

    @property
    def folder(self) -> str:
        """The YAML folder name under ``hparams/``."""
        return self.yaml_folder or self.name

    @property
    def retain_variant(self) -> Optional[str]:
        """The YAML stem suffix of the retain-aware row :data:`RETAIN_ROW`, if the method has one."""
        return self.row_variants.get(RETAIN_ROW)


_METHODS: Dict[str, MethodEntry] = {}


def register_method(entry: MethodEntry, replace: bool = False) -> MethodEntry:
    """Add ``entry`` (an existing name is an error unless ``replace``). Returns ``entry``.

    EasyEdit sees a method registered after ``import zerounlearn_editor`` once
    :func:`~zerounlearn_editor.integrations.easyedit.register_with_easyedit` runs again (it is idempotent).
    """
    if not isinstance(entry, MethodEntry):
        raise TypeError(f"expected a MethodEntry, got {type(entry).__name__}")
    base = BaseHyperParams if entry.baseline else EditHyperParams
    if not (isinstance(entry.hparams_class, type) and issubclass(entry.hparams_class, base)):
        raise TypeError(
            f"method {entry.name!r}: hparams_class must subclass {base.__name__}, got {entry.hparams_class!r}"
        )
    if entry.hparams_class.ALG_NAME != entry.name:
        raise ValueError(
            f"method {entry.name!r}: its hparams class {entry.hparams_class.__name__} has ALG_NAME "
            f"{entry.hparams_class.ALG_NAME!r}; the two must be the same string"
        )
    if entry.name in _METHODS and not replace:
        raise ValueError(f"method {entry.name!r} is already registered (pass replace=True to replace it)")
    _METHODS[entry.name] = entry
    return entry


def unregister_method(name: str) -> MethodEntry:
    """Remove and return the entry ``name`` (an unknown name raises :class:`UnknownMethodError`)."""
    entry = get_method(name)
    del _METHODS[name]
    return entry


def registered_methods(baselines: bool = False) -> List[MethodEntry]:
    """The registered editing methods in registration order (the shipped ones first); ``baselines``: every entry,
    the comparison baselines included."""
    return [entry for entry in _METHODS.values() if baselines or not entry.baseline]


def method_names(baselines: bool = False) -> List[str]:
    """The names of :func:`registered_methods` (``baselines``: with the baselines)."""
    return [entry.name for entry in registered_methods(baselines)]


@contextmanager
def registered(entry: MethodEntry) -> Iterator[MethodEntry]:
    """``entry`` registered inside the ``with`` block and unregistered on leaving it (tests, scripts)."""
    register_method(entry)
    try:
        yield entry
    finally:
        if _METHODS.get(entry.name) is not None:
            del _METHODS[entry.name]


def get_method(name: Any, source: str = "method") -> MethodEntry:
    """The entry of ``name``; an unknown one raises :class:`UnknownMethodError` listing the registered names.

    ``source`` starts the message (e.g. ``"<file>: key 'alg_name'"``).
    """
    if isinstance(name, str) and name in _METHODS:
        return _METHODS[name]
    raise UnknownMethodError(f"{source}: unknown method {name!r}; registered: {', '.join(_METHODS)}")


@dataclass(frozen=True)
class LoadedMethod:
    """An hparams file read once (:func:`read_method`): its ``hparams``, the method's ``apply`` function and the
    file as read (``source``: its path and the sha256 of its bytes)."""

    hparams: Any
    apply: Callable[..., Any]
    source: ConfigFile


def read_method(hparams_file: Union[str, Path]) -> LoadedMethod:
    """The registered editing method named by the file's ``alg_name``, with its hparams (the file read once).

    An unknown name lists the registered ones; a baseline's YAML raises :class:`BaselineMethodError` (its entry's
    ``baseline`` flag: the bench runs it, ``unlearn`` does not).
    """
    source = f"{hparams_file}: key 'alg_name'"
    config_file = read_config_file(hparams_file)
    entry = get_method(config_file.config.get("alg_name"), source)
    if entry.baseline:
        raise BaselineMethodError(
            f"{source}: {entry.name} is a comparison baseline, run by `zerounlearn bench --methods {entry.name}` "
            f"only; unlearn runs the editing methods: {', '.join(method_names())}"
        )
    return LoadedMethod(entry.hparams_class.from_config_file(config_file), entry.apply, config_file)


def load_method(hparams_file: Union[str, Path]) -> Tuple[Any, Callable[..., Any]]:
    """``(hparams, apply function)`` of :func:`read_method`."""
    loaded = read_method(hparams_file)
    return loaded.hparams, loaded.apply


def _register_shipped() -> None:
    """GA and NPO (comparison baselines), ZeroUnlearn and ZeroUnlearn-GD (the package's own methods)."""
    from zerounlearn_editor.methods.baselines import (
        GAHyperParams,
        NPOHyperParams,
        apply_ga_to_model,
        apply_npo_to_model,
    )
    from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
    from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model, check_request_capacity
    from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
    from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model

    full = {"-full": "-full"}  # target_modules: all, every parameter trained
    register_method(MethodEntry("GA", GAHyperParams, apply_ga_to_model, row_variants=full, baseline=True))
    register_method(MethodEntry("NPO", NPOHyperParams, apply_npo_to_model, row_variants=full, baseline=True))
    # ZeroUnlearn's change D W - W = (D - I) W has rank <= 2n (eps 0); ZeroUnlearn-GD's E P_m rank <= n
    register_method(MethodEntry("ZeroUnlearn", ZeroUnlearnHyperParams, apply_zerounlearn_to_model,
                                check_requests=check_request_capacity, adapter_rank_per_fact=2))
    register_method(MethodEntry("ZeroUnlearn-GD", ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model,
                                adapter_rank_per_fact=1, row_variants={RETAIN_ROW: "-retain"}))


_register_shipped()
