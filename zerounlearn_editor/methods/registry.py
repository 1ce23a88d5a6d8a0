"""The one table of editing methods: name -> hyperparameter class, apply function, YAML folder.

Every consumer reads it: the package's EasyEdit registration
(:func:`~zerounlearn_editor.integrations.easyedit.register_with_easyedit`), ``zerounlearn unlearn`` /
``demo`` (:func:`load_method`), ``init-hparams``,
``hparams_doc``, the bench (:func:`~zerounlearn_editor.bench.registry.default_registry`) and the speed
bench. A new method is one :func:`register_method` call (here, for a shipped method, or in the
method's own module): nothing else needs editing. An unknown name is an error listing the registered ones.

The EasyEdit name, the YAML's ``alg_name`` and the registry name are one string
(``BaseEditor`` looks ``hparams.alg_name`` up in ``ALG_DICT``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, Union

from zerounlearn_editor.engine.hparams import EditHyperParams, HParamsError, load_config_file

__all__ = [
    "MethodEntry",
    "RETAIN_ROW",
    "UnknownMethodError",
    "register_method",
    "unregister_method",
    "get_method",
    "load_method",
    "method_names",
    "registered_methods",
]

RETAIN_ROW = "+R"
"""The bench row suffix whose edit receives the seed's retain set (the retain-aware variant)."""

RequestCheck = Callable[[Any, Any, int], None]
"""``(model, hparams, n_requests) -> None``: raises before any scoring when ``n`` requests cannot be edited."""


class UnknownMethodError(HParamsError):
    """A method name (an ``alg_name``, ``--method``) that is not registered."""


@dataclass(frozen=True)
class MethodEntry:
    """One registered editing method.

    ``name``: the ``alg_name`` of its YAMLs, its EasyEdit ``ALG_DICT`` key and its bench row.
    ``hparams_class``: an :class:`~zerounlearn_editor.engine.hparams.EditHyperParams` subclass whose
    ``ALG_NAME`` is ``name``. ``apply``: the edit in EasyEdit's calling convention
    ``(model, tok, requests, hparams, copy, return_orig_weights, keep_original_weight, **kwargs) ->
    (model, weights_copy)`` accepting the pipeline's keywords (``second_moments``, ``targets``,
    ``report``, ``progress``, ``retain``, ``fluency_guard``, ...). ``yaml_folder``: ``hparams/<folder>/``
    (default ``name``). ``check_requests``: an optional model-bound check run before any scoring
    (ZeroUnlearn's capacity limit). ``adapter_rank_per_fact``: the rank of one weight's change per
    forgotten fact (the LoRA export's bound ``r <= k n``). ``row_variants``: bench row suffix -> YAML stem
    suffix; the bench also offers the row ``<name><row suffix>``, read from ``hparams/<folder>/<stem><stem
    suffix>.yaml`` (ZeroUnlearn-GD: ``+R`` -> ``-retain``, ``+P`` -> ``-lifelong``, which no longer ships: the bench's
    ``--method-hparams`` names it). Only the row
    :data:`RETAIN_ROW` is edited with the seed's retain set. ``easyedit_batchable``: EasyEdit's ``batch_edit``
    accepts the method.
    """

    name: str
    hparams_class: Type[EditHyperParams]
    apply: Callable[..., Any]
    yaml_folder: Optional[str] = None
    check_requests: Optional[RequestCheck] = None
    adapter_rank_per_fact: int = 1
    row_variants: Mapping[str, str] = field(default_factory=dict)
    easyedit_batchable: bool = True

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
    if not (isinstance(entry.hparams_class, type) and issubclass(entry.hparams_class, EditHyperParams)):
        raise TypeError(
            f"method {entry.name!r}: hparams_class must subclass EditHyperParams, got {entry.hparams_class!r}"
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


def method_names() -> List[str]:
    """The registered names, in registration order (the shipped methods first)."""
    return list(_METHODS)


def registered_methods() -> List[MethodEntry]:
    """The registered entries, in registration order."""
    return list(_METHODS.values())


def get_method(name: Any, source: str = "method") -> MethodEntry:
    """The entry of ``name``; an unknown one raises :class:`UnknownMethodError` listing the registered names.

    ``source`` starts the message (e.g. ``"<file>: key 'alg_name'"``).
    """
    if isinstance(name, str) and name in _METHODS:
        return _METHODS[name]
    raise UnknownMethodError(f"{source}: unknown method {name!r}; registered: {', '.join(_METHODS)}")


def load_method(hparams_file: Union[str, Path]) -> Tuple[Any, Callable[..., Any]]:
    """``(hparams, apply function)`` of the registered method named by the file's ``alg_name``
    (an unknown name lists the registered ones)."""
    entry = get_method(load_config_file(hparams_file).get("alg_name"), f"{hparams_file}: key 'alg_name'")
    return entry.hparams_class.from_hparams(hparams_file), entry.apply


def _register_shipped() -> None:
    """ZeroUnlearn and ZeroUnlearn-GD, the package's own methods."""
    from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
    from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model, check_request_capacity
    from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
    from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model

    # ZeroUnlearn's change D W - W = (D - I) W has rank <= 2n (eps 0); ZeroUnlearn-GD's E P_m rank <= n
    register_method(MethodEntry("ZeroUnlearn", ZeroUnlearnHyperParams, apply_zerounlearn_to_model,
                                check_requests=check_request_capacity, adapter_rank_per_fact=2))
    register_method(MethodEntry("ZeroUnlearn-GD", ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model,
                                adapter_rank_per_fact=1, row_variants={RETAIN_ROW: "-retain", "+P": "-lifelong"}))


_register_shipped()
