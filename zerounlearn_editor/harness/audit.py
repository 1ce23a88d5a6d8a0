"""``zerounlearn audit``: the probes of :mod:`.suite` for the unedited model and every method.

Per seed ``k``: ``n`` cases drawn as the bench draws them (``sample_cases(cases, n, k)``, from
the known cases with ``known_only``), one :class:`~.plan.AuditPlan` (in-context examples,
distractors and relearning facts from the whole dataset, seeded with ``k``), the ``base`` row
on the unedited model, then per method: check the model is the unedited one (fingerprint), edit
all cases as one batch, score every probe, restore the weights. Methods are the bench's
(:func:`~zerounlearn_editor.harness.method_rows.default_registry`: ours, ``+R``, GA/NPO and EasyEdit's
where importable), with the bench's hyperparameter lookup, shared ``C0`` and retain draws.

Resumable like the bench: ``<out>/audit_seed_<k>.json`` is rewritten atomically after every
method; on a new call a finished method with the same configuration hash is kept, a file of
another data / n / audit setting is an error. ``audit.json`` / ``audit.md`` / ``audit.png``
are rebuilt from the seed files at the end.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.audit.facts_audit import generic_passages
from zerounlearn_editor.evaluation.audit.items import audit_pool, builtin_pool, items_from_cases, pool_from_cases
from zerounlearn_editor.evaluation.audit.plan import (
    AuditError,
    AuditSettings,
    build_plan,
    check_audit_inputs,
    check_families,
    check_plan_lengths,
)
from zerounlearn_editor.evaluation.audit.suite import LensConfig, score_model
from zerounlearn_editor.harness.audit_report import write_audit_summary
from zerounlearn_editor.harness.bench_config import BenchConfigError, default_audit_methods
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint, draw_retain, parse_retain_spec
from zerounlearn_editor.harness.run_setup import MethodSetup, load_model, prepare_run, setup_methods
from zerounlearn_editor.support.files import read_json, write_json_atomic
from zerounlearn_editor.support.model_access import max_positions
from zerounlearn_editor.support.progress import progress_scope

__all__ = ["AuditConfig", "run_audit", "audit_seed_path"]

LOG = logging.getLogger(__name__)



@dataclass
class AuditConfig:
    """One audit run (fields as :class:`~zerounlearn_editor.harness.bench_config.BenchConfig`; ``settings`` = the
    probes)."""

    hparams: str
    data: str
    out: str
    seeds: List[int] = field(default_factory=lambda: [1])
    methods: List[str] = field(default_factory=default_audit_methods)
    n: int = 10
    settings: AuditSettings = field(default_factory=AuditSettings)
    method_hparams: Dict[str, str] = field(default_factory=dict)
    data_path: Optional[str] = None
    device: str = "cpu"
    dtype: Optional[str] = None
    known_only: bool = False
    known_min_accuracy: float = 1.0
    retain: Optional[str] = None
    progress: bool = True

    def validate(self) -> None:
        """Raise :class:`BenchConfigError` naming the first bad field (before any heavy work)."""
        if self.n < 1:
            raise BenchConfigError(f"audit: n must be >= 1, got {self.n}")
        if not self.seeds:
            raise BenchConfigError("audit: no seed given")
        if not self.methods:
            raise BenchConfigError("audit: no method given")
        if not 0.0 < self.known_min_accuracy <= 1.0:
            raise BenchConfigError(f"audit: known_min_accuracy must be in (0, 1], got {self.known_min_accuracy}")
        needing = [m for m in self.methods if str(m).endswith("+R")]
        if needing and parse_retain_spec(self.retain) is None:
            raise BenchConfigError(f"audit: methods {needing} need a retain set (--retain siblings:K or same-answer:K)")
        try:
            self.settings.validate()
            self.settings.check_fact_count(self.n)
        except ValueError as exc:
            raise BenchConfigError(str(exc)) from None


def audit_seed_path(out: Path, seed: int) -> Path:
    """``<out>/audit_seed_<seed>.json``."""
    return Path(out) / f"audit_seed_{seed}.json"


def _run_info(config: AuditConfig, model_name: str) -> Dict[str, Any]:
    """The settings every stored seed result must share with this run (as JSON reads them back)."""
    return json.loads(
        json.dumps(
            {
                "data": config.data,
                "data_path": config.data_path,
                "n": config.n,
                "model": model_name,
                "known_only": config.known_only,
                "known_min_accuracy": config.known_min_accuracy if config.known_only else None,
                "retain": config.retain,
                "dtype": config.dtype,
                "settings": config.settings.to_dict(),
            }
        )
    )


def run_audit(config: AuditConfig, model=None, tok=None, registry=None, loader=None) -> Dict[str, Any]:
    """Run (or resume) an audit; returns the summary (see module docstring).

    ``model``/``tok``: an already loaded model (else the main hparams' ``model_name`` is loaded,
    only when there is work to do); ``registry``: methods by name; ``loader``: ``(name, device) -> (model, tok)``.
    """
    with progress_scope(config.progress):
        return _run_audit(config, model, tok, registry, loader)


def _run_audit(config: AuditConfig, model, tok, registry, loader) -> Dict[str, Any]:
    config.validate()
    setup = setup_methods(config.methods, config.method_hparams, config.hparams, registry, what="audit: ")
    methods, lookup, signatures = setup.names, setup.lookup, setup.signatures
    all_cases = load_cases(config.data, path=config.data_path)
    pool_cases = list(all_cases)
    draw = parse_retain_spec(config.retain)
    passages = generic_passages(lookup.main.mom2_dataset) if "relearning" in config.settings.families else []
    pool = audit_pool(pool_from_cases(pool_cases), builtin_pool())
    check_families(items_from_cases(all_cases), config.settings)
    if not config.known_only:  # the borrowing checks of every seed's facts, before any model loads
        for seed in config.seeds:
            check_audit_inputs(
                items_from_cases(sample_cases(all_cases, config.n, seed)), pool, config.settings, passages
            )
    if config.known_only:
        if model is None:
            model, tok = load_model(loader, str(lookup.main.model_name), config.device, config.dtype)
        from zerounlearn_editor.evaluation.selection import select_known_cases

        all_cases = select_known_cases(model, tok, all_cases, None, min_accuracy=config.known_min_accuracy)
        if len(all_cases) < config.n:
            raise BenchConfigError(
                f"audit known_only: only {len(all_cases)} {config.data} cases are known, n={config.n} needed"
            )
    run_info = _run_info(config, str(lookup.main.model_name))
    out = Path(config.out)
    plan_list = []
    for seed in config.seeds:
        cases = sample_cases(all_cases, config.n, seed)
        path = audit_seed_path(out, seed)
        retain = draw_retain(draw, cases, pool_cases, seed) if draw else []
        if path.exists():
            record = read_json(path)
            stored = record.get("run", {})
            diff = [k for k, v in run_info.items() if stored.get(k) != v]
            if diff or record.get("case_ids") != [c.case_id for c in cases] or record.get("retain", []) != retain:
                raise BenchConfigError(
                    f"{path} holds an audit of another configuration ({', '.join(diff) or 'cases/retain'}); "
                    "use another --out or remove it"
                )
        else:
            record = {
                "seed": seed,
                "run": run_info,
                "case_ids": [c.case_id for c in cases],
                "retain": retain,
                "methods": {},
            }
        entries = record["methods"]
        todo = [m for m in methods if not (entries.get(m, {}).get("status") == "ok"
                                           and entries[m].get("config_sha256") == signatures[m])]
        if todo:
            plan_list.append((seed, path, record, cases, todo))
    if plan_list:
        if model is None:
            model, tok = load_model(loader, str(lookup.main.model_name), config.device, config.dtype)
        _run_plan(config, model, tok, setup, plan_list, pool, passages)
    records = {seed: read_json(audit_seed_path(out, seed)) for seed in config.seeds}
    header = {"hparams": config.hparams, **{k: v for k, v in run_info.items()}}
    audited = min(config.n, len(all_cases))  # sample_cases takes every case when n is larger
    if audited < config.n:
        LOG.warning(
            "audit: n = %d asked for, but the data has %d cases: %d audited per seed", config.n, audited, audited
        )
        header.update(n=audited, n_requested=config.n)
    return write_audit_summary(out, header, methods, records)


def _run_plan(config, model, tok, setup: MethodSetup, plan_list, pool, passages) -> None:
    main = setup.lookup.main
    signatures, descriptions = setup.signatures, setup.descriptions
    lens = LensConfig(main.layers[0], main.layer_module_tmp, main.ln_f_module)
    plans = {}
    for seed, _, _, cases, _ in plan_list:  # every seed's probes drawn and length-checked before any edit work
        plans[seed] = build_plan(items_from_cases(cases), pool, tok, dataclasses.replace(config.settings, seed=seed),
                                 passages)
        check_plan_lengths(plans[seed], tok, max_positions(model))
    run = prepare_run(setup, model, tok, Path(config.out), [m for *_, todo in plan_list for m in todo], config.progress)
    fingerprint, prepared, bank = run.fingerprint, run.prepared, run.bank
    for seed, path, record, cases, todo in plan_list:
        settings = dataclasses.replace(config.settings, seed=seed)
        plan = plans[seed]
        record["plan"] = plan.describe()
        retain = list(record.get("retain") or [])
        check_retain_disjoint(retain, cases)
        requests = [dict(c.request) for c in cases]
        for name in todo:
            entry: Dict[str, Any] = {"config_sha256": signatures[name], "config": descriptions.get(name, {})}
            fingerprint.verify(model, f"audit seed {seed}: before {name}")
            if name == "base":
                LOG.info("audit seed %d: unedited model", seed)
                entry.update(status="ok", probes=score_model(model, tok, plan, settings, lens))
            else:
                entry.update(
                    _edit_and_score(prepared[name], model, tok, requests, bank, retain, plan, settings, lens, seed)
                )
            record["methods"][name] = entry
            write_json_atomic(path, record)
        fingerprint.verify(model, f"audit seed {seed}: after the last method")


def _edit_and_score(method, model, tok, requests, bank, retain, plan, settings, lens, seed) -> Dict[str, Any]:
    if method.skip_reason is not None:
        LOG.warning("audit seed %d: %s %s", seed, method.name, method.skip_reason)
        return {"status": "skipped", "reason": method.skip_reason}
    LOG.info("audit seed %d: %s edit of %d requests", seed, method.name, len(requests))
    try:
        extra = {"retain": [dict(r) for r in retain]} if method.uses_retain else {}
        outcome = method.edit(model, tok, [dict(r) for r in requests], bank, **extra)
    except Exception as exc:  # noqa: BLE001 - one failing method must not sink the audit
        LOG.exception("audit seed %d: %s failed", seed, method.name)
        return {"status": "error", "reason": f"error: {type(exc).__name__}: {exc}"}
    try:
        probes = score_model(model, tok, plan, settings, lens)
    except AuditError as exc:  # e.g. the edit left non-finite weights: an error, never a 0 % row
        LOG.error("audit seed %d: %s: %s", seed, method.name, exc)
        return {"status": "error", "reason": f"error: {exc}"}
    finally:
        restore_weights(model, outcome.weights_copy)
    return {"status": "ok", "probes": probes, "edited_parameters": sorted(outcome.weights_copy)}
