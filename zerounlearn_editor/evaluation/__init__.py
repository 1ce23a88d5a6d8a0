"""Evaluation: teacher-forced probe metrics, perplexity, fluency, greedy generation and
EasyEdit-style per-request metric dicts. All of it runs on CPU with any HF causal LM.

Probes are scored on ``prompt + " " + answer`` (answers are stored without a leading space).
"""
from __future__ import annotations

from zerounlearn_editor.evaluation.batching import EncodedProbe, encode_probe
from zerounlearn_editor.evaluation.easyedit_format import CaseScores, easyedit_metrics
from zerounlearn_editor.evaluation.fluency import ngram_entropy, text_ngram_entropy
from zerounlearn_editor.evaluation.generation import generate_greedy
from zerounlearn_editor.evaluation.metrics import ProbeScores, evaluate_probes
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.evaluation.selection import select_known_cases

__all__ = [
    "CaseScores", "EncodedProbe", "ProbeScores", "easyedit_metrics", "encode_probe", "evaluate_probes",
    "generate_greedy", "ngram_entropy", "perplexity",
    "select_known_cases", "text_ngram_entropy",
]
