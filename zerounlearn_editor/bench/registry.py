"""The bench's method registry: every method it can compare, ours and the baselines.

Kept apart from :mod:`.method_specs` (the interface and our methods' specs) because it also needs
:mod:`.easyedit_baselines`, which builds on that interface.
"""
from __future__ import annotations

from typing import Dict

from zerounlearn_editor.bench.easyedit_baselines import EASYEDIT_METHODS, easyedit_spec
from zerounlearn_editor.bench.method_specs import MethodSpec, baseline_spec, edit_method_spec
from zerounlearn_editor.methods.registry import registered_methods

__all__ = ["default_registry"]


def default_registry() -> Dict[str, MethodSpec]:
    """A fresh registry of every method the bench knows (``base`` is handled by the runner).

    The editing methods (and their variant rows such as ``+R`` / ``+P``) are read from
    :mod:`zerounlearn_editor.methods.registry` at each call, so a method registered there is a bench row too.
    """
    registry: Dict[str, MethodSpec] = {}
    for name in ("GA", "NPO"):
        registry[name] = baseline_spec(name)
        registry[f"{name}-full"] = baseline_spec(f"{name}-full", name, "-full")
    for entry in registered_methods():
        registry[entry.name] = edit_method_spec(entry.name)
        for suffix in entry.row_variants:
            registry[f"{entry.name}{suffix}"] = edit_method_spec(f"{entry.name}{suffix}")
    for name in EASYEDIT_METHODS:
        registry[name] = easyedit_spec(name)
    return registry
