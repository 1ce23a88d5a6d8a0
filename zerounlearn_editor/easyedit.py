"""Registration of our methods with EasyEdit (``zjunlp/EasyEdit``, run from its source tree).

EasyEdit's ``editors/editor.py`` imports ``ALG_DICT`` with ``import *``, so adding entries to
the dict object in ``easyeditor.util.alg_dict`` makes ``BaseEditor`` see them. Batch editing
is gated by the static method ``BatchEditor.is_batchable_method`` (a hard-coded list on an
Enum); we wrap it once so it also accepts our method names.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from typing import Callable, Dict, Optional

__all__ = ["METHODS", "easyedit_available", "register_with_easyedit"]

LOG = logging.getLogger(__name__)

_WRAPPED_FLAG = "_zerounlearn_batchable_names"


def _methods() -> Dict[str, Callable]:
    from .zerounlearn_gd_main import apply_zerounlearn_gd_to_model
    from .zerounlearn_main import apply_zerounlearn_to_model

    return {"ZeroUnlearn": apply_zerounlearn_to_model, "ZeroUnlearn-GD": apply_zerounlearn_gd_to_model}


METHODS = ("ZeroUnlearn", "ZeroUnlearn-GD")


def _add_easyedit_path(path: Optional[str]) -> None:
    path = path or os.environ.get("EASYEDIT_PATH")
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)


def easyedit_available(path: Optional[str] = None) -> bool:
    """Whether ``easyeditor`` can be found (on ``sys.path``, or in ``path``/``$EASYEDIT_PATH``)."""
    _add_easyedit_path(path)
    return importlib.util.find_spec("easyeditor") is not None


def register_with_easyedit(path: Optional[str] = None) -> bool:
    """Add ZeroUnlearn and ZeroUnlearn-GD to EasyEdit's ``ALG_DICT`` and batch gate.

    Idempotent. ``path`` (or ``$EASYEDIT_PATH``) is an EasyEdit source tree to import from.
    Returns False (and logs why) when EasyEdit cannot be imported.
    """
    if not easyedit_available(path):
        LOG.debug("EasyEdit not importable; set EASYEDIT_PATH to its source tree to register")
        return False
    try:
        alg_dict = importlib.import_module("easyeditor.util.alg_dict")
        batch_module = importlib.import_module("easyeditor.editors.batch_editor")
    except Exception as exc:  # a broken EasyEdit install must not break our import
        LOG.warning("EasyEdit found but failed to import (%s: %s); not registering", type(exc).__name__, exc)
        return False
    alg_dict.ALG_DICT.update(_methods())
    batch_editor = batch_module.BatchEditor
    names = getattr(batch_editor, _WRAPPED_FLAG, None)
    if names is None:
        original = batch_editor.is_batchable_method
        ours = frozenset(METHODS)

        def is_batchable_method(alg_name: str) -> bool:
            return alg_name in ours or original(alg_name)

        batch_editor.is_batchable_method = staticmethod(is_batchable_method)
        setattr(batch_editor, _WRAPPED_FLAG, ours)
    LOG.debug("registered %s with EasyEdit", ", ".join(METHODS))
    return True
