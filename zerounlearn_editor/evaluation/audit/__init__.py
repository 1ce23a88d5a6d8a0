"""Robustness audit of an unlearning edit: is a forgotten fact really gone, or only from its prompt?

For the forgotten facts, before and after the edit, each probe gives the % of facts **recovered**
(the answer's first token is the greedy next token; see :mod:`.suite` for the exact rules):

* formats: the prompt, its paraphrases, a question form, the model's chat template (:mod:`.plan`);
* in-context: K = 1, 3, 5 borrowed facts before the prompt, naming no forgotten subject or answer;
* multiple choice: the true answer against 3 distractors, by log-probability;
* logit lens: the answer's best rank over the layers from the first edited one on (:mod:`.lens`);
* quantization: int8 / int4 round-to-nearest copies (:mod:`.quantize`);
* relearning: a few fine-tuning steps on related facts, and on generic text as the control (:mod:`.relearn`);
* rtt: the same fine-tuning on half of the forgotten facts (prompt and true answer), the other half measured;
* RWKU's own levels when the data is RWKU.

``zerounlearn audit`` runs it for the bench's methods (:mod:`zerounlearn_editor.harness.audit`);
:func:`~.plan.build_plan` + :func:`~.suite.score_model` score any model.
"""
from __future__ import annotations

from zerounlearn_editor.evaluation.audit.items import (
    AuditItem,
    PoolFact,
    items_from_cases,
    items_from_facts,
    pool_from_cases,
    pool_from_facts,
)
from zerounlearn_editor.evaluation.audit.plan import (
    FAMILIES,
    AuditError,
    AuditPlan,
    AuditSettings,
    build_plan,
    parse_families,
)
from zerounlearn_editor.evaluation.audit.suite import LensConfig, probe_columns, score_model

__all__ = [
    "AuditError", "AuditItem", "AuditPlan", "AuditSettings", "FAMILIES", "LensConfig", "PoolFact", "build_plan",
    "items_from_cases", "items_from_facts", "parse_families", "pool_from_cases", "pool_from_facts",
    "probe_columns", "score_model",
]
