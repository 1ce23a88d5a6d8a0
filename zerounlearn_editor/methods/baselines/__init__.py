"""Fine-tuning unlearning baselines: GA (gradient ascent) and NPO, each on the ZeroUnlearn
edit sites only (``target_modules: layers``) or on all parameters (``target_modules: all``).

Laid out as the methods are: ``config.py`` (the keys), ``method.py`` (each objective and its apply function) and
``training.py`` (the fine-tuning loop they share, in place of a pure-maths ``solve.py``).
"""
from __future__ import annotations

from zerounlearn_editor.methods.baselines.config import BaselineHyperParams, GAHyperParams, NPOHyperParams
from zerounlearn_editor.methods.baselines.method import (
    apply_ga_to_model,
    apply_npo_to_model,
    ga_loss,
    npo_loss,
)
from zerounlearn_editor.methods.baselines.training import TrainReport

__all__ = [
    "BaselineHyperParams", "GAHyperParams", "NPOHyperParams", "apply_ga_to_model", "apply_npo_to_model",
    "ga_loss", "npo_loss", "TrainReport",
]
