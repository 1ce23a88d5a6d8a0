"""zerounlearn-editor: ZeroUnlearn and ZeroUnlearn-GD fact unlearning as EasyEdit methods.

Importing the package registers the methods of :mod:`zerounlearn_editor.methods.registry` (ZeroUnlearn,
ZeroUnlearn-GD) with EasyEdit when EasyEdit is importable (on ``sys.path`` or via ``$EASYEDIT_PATH``);
:func:`register_with_easyedit` does it explicitly (again after a :func:`register_method`).
"""
from __future__ import annotations

import logging

from zerounlearn_editor.engine.fluency_guard import FluencyError
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import EditReport, restore_weights
from zerounlearn_editor.engine.requests import RequestError
from zerounlearn_editor.integrations.adapters import NotLowRankError, export_lora_adapter
from zerounlearn_editor.integrations.easyedit import register_with_easyedit
from zerounlearn_editor.methods.registry import MethodEntry, get_method, method_names, register_method
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model

__version__ = "0.1.0"

__all__ = ["ZeroUnlearnHyperParams", "ZeroUnlearnGDHyperParams", "apply_zerounlearn_to_model",
           "apply_zerounlearn_gd_to_model", "register_with_easyedit", "export_lora_adapter",
           "NotLowRankError", "restore_weights", "EditReport", "HParamsError", "RequestError", "FluencyError",
           "MethodEntry", "register_method", "get_method", "method_names"]

logging.getLogger(__name__).addHandler(logging.NullHandler())
register_with_easyedit()
