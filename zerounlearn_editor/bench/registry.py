"""The bench's method registry: every method it can compare, ours and the baselines.

Kept apart from :mod:`.methods` (the interface and our methods' specs) because it also needs
:mod:`.easyedit_baselines`, which builds on that interface.
"""
from __future__ import annotations

from typing import Dict

from zerounlearn_editor.bench.easyedit_baselines import EASYEDIT_METHODS, easyedit_spec
from zerounlearn_editor.bench.methods import MethodSpec, baseline_spec, zerounlearn_spec

__all__ = ["default_registry"]


def default_registry() -> Dict[str, MethodSpec]:
    """A fresh registry of every method the bench knows (``base`` is handled by the runner)."""
    registry: Dict[str, MethodSpec] = {}
    for name in ("GA", "NPO"):
        registry[name] = baseline_spec(name)
        registry[f"{name}-full"] = baseline_spec(f"{name}-full", name, "-full")
    for name in ("ZeroUnlearn", "ZeroUnlearn-GD", "ZeroUnlearn-GD+R", "ZeroUnlearn-GD+P"):
        registry[name] = zerounlearn_spec(name)
    for name in EASYEDIT_METHODS:
        registry[name] = easyedit_spec(name)
    return registry
