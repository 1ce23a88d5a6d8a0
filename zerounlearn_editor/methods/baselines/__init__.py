"""Fine-tuning unlearning baselines: GA (gradient ascent) and NPO, each on the ZeroUnlearn
edit sites only (``target_modules: layers``) or on all parameters (``target_modules: all``).
"""
from __future__ import annotations

from zerounlearn_editor.methods.baselines.ga import apply_ga_to_model, ga_loss
from zerounlearn_editor.methods.baselines.hparams import BaselineHyperParams, GAHyperParams, NPOHyperParams
from zerounlearn_editor.methods.baselines.npo import apply_npo_to_model, npo_loss
from zerounlearn_editor.methods.baselines.training import TrainReport, sequence_log_probs, train_unlearning

__all__ = [
    "BaselineHyperParams",
    "GAHyperParams",
    "NPOHyperParams",
    "apply_ga_to_model",
    "apply_npo_to_model",
    "ga_loss",
    "npo_loss",
    "sequence_log_probs",
    "train_unlearning",
    "TrainReport",
]
