"""zerounlearn-editor: ZeroUnlearn and ZeroUnlearn-GD fact unlearning as EasyEdit methods.

Importing the package registers both methods with EasyEdit when EasyEdit is importable
(on ``sys.path`` or via ``$EASYEDIT_PATH``); :func:`register_with_easyedit` does it explicitly.
"""
from __future__ import annotations

import logging

from .adapters import NotLowRankError, export_lora_adapter
from .easyedit import register_with_easyedit
from .fluency_guard import FluencyError
from .hparams import HParamsError, ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams
from .pipeline import EditReport, restore_weights
from .requests import RequestError
from .zerounlearn_gd_main import apply_zerounlearn_gd_to_model
from .zerounlearn_main import apply_zerounlearn_to_model

__version__ = "0.1.0"

__all__ = [
    "ZeroUnlearnHyperParams",
    "ZeroUnlearnGDHyperParams",
    "apply_zerounlearn_to_model",
    "apply_zerounlearn_gd_to_model",
    "register_with_easyedit",
    "export_lora_adapter",
    "NotLowRankError",
    "restore_weights",
    "EditReport",
    "HParamsError",
    "RequestError",
    "FluencyError",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
register_with_easyedit()
