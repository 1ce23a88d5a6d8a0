"""The audit's probes as bench columns (``zerounlearn bench --audit``).

Per seed one :class:`~.plan.AuditPlan` is drawn for the seed's cases (seeded with the seed, borrowed
facts from the whole dataset), and every row (base and each method, after its edit) gets the metrics
``audit:<probe>`` = recovered % (:mod:`.suite`), which the bench's summary aggregates over seeds.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Sequence

from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.evaluation.audit.items import audit_pool, builtin_pool, items_from_cases, pool_from_cases
from zerounlearn_editor.evaluation.audit.plan import (
    AuditPlan,
    AuditSettings,
    build_plan,
    check_families,
    check_plan_lengths,
)
from zerounlearn_editor.evaluation.audit.suite import LensConfig, score_model
from zerounlearn_editor.harness.case_scoring import AUDIT_PREFIX
from zerounlearn_editor.support.model_access import max_positions

__all__ = ["BenchAudit", "check_audit_data"]


def check_audit_data(settings: AuditSettings, cases: Sequence[UnlearnCase]) -> None:
    """The audit's checks on the dataset before any model loads (:func:`~.plan.check_families`)."""
    check_families(items_from_cases(cases), settings)


class BenchAudit:
    """What a bench run needs to add the audit columns: settings, lens position, pool, generic text."""

    def __init__(self, settings: AuditSettings, main_hparams: Any, pool_cases: Sequence[UnlearnCase]):
        from zerounlearn_editor.evaluation.audit.facts_audit import generic_passages

        self.settings = settings
        self.lens = LensConfig(main_hparams.layers[0], main_hparams.layer_module_tmp, main_hparams.ln_f_module)
        self.pool = audit_pool(pool_from_cases(pool_cases), builtin_pool())
        self.passages = generic_passages(main_hparams.mom2_dataset) if "relearning" in settings.families else []
        self._plans: Dict[int, AuditPlan] = {}

    def plan(self, seed: int, cases: Sequence[UnlearnCase], tok: Any, model: Any = None) -> AuditPlan:
        """The seed's probes (the same for every row of the seed; drawn once), length-checked against ``model``'s
        position embeddings when given."""
        if seed not in self._plans:
            settings = dataclasses.replace(self.settings, seed=seed)
            self._plans[seed] = build_plan(items_from_cases(cases), self.pool, tok, settings, self.passages)
        if model is not None:
            check_plan_lengths(self._plans[seed], tok, max_positions(model))
        return self._plans[seed]

    def metrics(self, model: Any, tok: Any, plan: AuditPlan) -> Dict[str, float]:
        """``{"audit:<probe>": recovered %}`` of ``model`` on ``plan``."""
        settings = dataclasses.replace(self.settings, seed=0)
        return {
            AUDIT_PREFIX + name: r["recovered"]
            for name, r in score_model(model, tok, plan, settings, self.lens).items()
        }
