"""The bench's rows: one :class:`~zerounlearn_editor.harness.method_specs.MethodSpec` per method it can compare.

Read from :mod:`zerounlearn_editor.methods.registry` at each call (the editing methods, the baselines GA/NPO and
each entry's ``row_variants``), plus EasyEdit's own methods (:mod:`.easyedit_baselines`). Kept apart from
:mod:`.method_specs` (the interface) because it also needs :mod:`.easyedit_baselines`, which builds on it.
"""
from __future__ import annotations

from typing import Dict, List

from zerounlearn_editor.harness.easyedit_baselines import EASYEDIT_METHODS, easyedit_spec
from zerounlearn_editor.harness.method_specs import MethodSpec, baseline_spec, edit_method_spec
from zerounlearn_editor.methods.registry import registered_methods

__all__ = ["default_registry", "row_names"]


def default_registry() -> Dict[str, MethodSpec]:
    """A fresh ``{row: spec}`` of every method the bench knows (``base`` is handled by the runner).

    Per registered entry (baselines first, in registration order): its row and its ``row_variants`` rows
    (``GA-full``, ``ZeroUnlearn-GD+R``, ...), then EasyEdit's FT/ROME/MEMIT/AlphaEdit. A method registered in
    :mod:`zerounlearn_editor.methods.registry` is a bench row too.
    """
    registry: Dict[str, MethodSpec] = {}
    for entry in registered_methods(baselines=True):
        if entry.baseline:
            registry[entry.name] = baseline_spec(entry)
            for suffix, variant in entry.row_variants.items():
                registry[entry.name + suffix] = baseline_spec(entry, suffix, variant)
            continue
        registry[entry.name] = edit_method_spec(entry.name)
        for suffix in entry.row_variants:
            registry[entry.name + suffix] = edit_method_spec(entry.name + suffix)
    for name in EASYEDIT_METHODS:
        registry[name] = easyedit_spec(name)
    return registry


def row_names() -> List[str]:
    """``base`` and every row of :func:`default_registry` (the ``--methods`` choices)."""
    return ["base", *default_registry()]
