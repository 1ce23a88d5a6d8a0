"""Run a bench: per seed, sample cases, edit with every method, evaluate, restore.

For each seed ``k`` the runner draws ``n`` cases (``sample_cases(cases, n, seed=k)``, the same
draw as ``load_cases(name, n=n, seed=k)``; neighbour probes that another drawn case forgets are
dropped, :mod:`.neighbours`), scores the unedited model once (the ``base`` row
and every method's "pre" values), then for each method: checks the model is bit-identical to
the unedited one, edits all ``n`` requests as one batch, scores, and restores the weights from
the method's ``weights_copy``. ``C0`` is computed once per run, before any edit, for every
layer any method needs (one pass per module template), and shared by all methods and seeds.

Results go to ``<out>/seed_<k>.json`` (rewritten atomically after every method, so an
interrupted seed resumes at the next method). On a new call, a method entry is reused when it
finished (``status: ok``) with the same method configuration (hash of its hparams files and
of the statistics settings); a file written for another dataset, ``n``, perplexity or fluency
setting is an error rather than silently mixed. If nothing is left to do, the model is not
even loaded. ``summary.json`` and ``summary.md`` are rebuilt from the seed files at the end.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torch import nn
from tqdm.auto import tqdm

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.engine.stats import model_basename
from zerounlearn_editor.evaluation.easyedit_format import easyedit_metrics
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.harness.bench_config import BenchConfig, BenchConfigError
from zerounlearn_editor.harness.case_scoring import (
    ScoringSettings,
    model_metrics,
    ppl_token_count,
    probe_metrics,
    score_cases,
)
from zerounlearn_editor.harness.method_specs import (
    MethodSpec,
    PreparedMethod,
    StatsBank,
)
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.harness.neighbours import (
    drop_batch_forget_neighbours,
    neighbours_naming_forgotten_subjects,
)
from zerounlearn_editor.harness.report import write_summary
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint, draw_retain, parse_retain_spec
from zerounlearn_editor.harness.run_setup import (
    BASE_SIGNATURE,
    MethodSetup,
    ModelLoader,
    load_model,
    prepare_run,
    setup_methods,
)
from zerounlearn_editor.harness.stages import Stage
from zerounlearn_editor.harness.stored_settings import check_one_ppl_layout, check_stored_run, mark_ppl_windows
from zerounlearn_editor.support.files import read_json, write_json_atomic
from zerounlearn_editor.support.progress import progress_scope

__all__ = ["run_bench", "seed_path", "check_stored_neighbours", "ModelLoader", "PPL_TEXT"]

LOG = logging.getLogger(__name__)

PPL_TEXT = "text/wikitext2_raw_test.txt"  # the embedded default is the same file (embedded.PPL_TEXT_NAME)
"""``(model_name, device) -> (model, tokenizer)``."""


def seed_path(out: Path, seed: int) -> Path:
    """``<out>/seed_<seed>.json``."""
    return Path(out) / f"seed_{seed}.json"


def _run_info(config: BenchConfig, model_name: str, ppl_text: Optional[str]) -> Dict[str, Any]:
    """The settings every stored seed result must share with this run."""
    return {
        "data": config.data,
        "data_path": config.data_path,
        "n": config.n,
        "model": model_name,
        "ppl_tokens": config.ppl_tokens,
        "ppl_text": Path(ppl_text).name if ppl_text else None,
        "fluency": config.fluency,
        "fluency_tokens": config.fluency_tokens if config.fluency else None,
        "known_only": config.known_only,
        "known_min_accuracy": config.known_min_accuracy if config.known_only else None,
        "retain": config.retain,
        "dtype": config.dtype,
        **({"utility": config.utility, "utility_n": config.utility_n} if config.utility else {}),
        **({"group_generation": True} if config.group_generation else {}),
        **({"audit": json.loads(json.dumps(config.audit.to_dict()))} if config.audit is not None else {}),
    }


def check_stored_neighbours(path: Path, record: Mapping[str, Any], dropped: int, adding: bool) -> None:
    """Refuse to add results to a seed file whose neighbours were filtered differently.

    Seed files written before :mod:`.neighbours` existed keep every neighbour probe (no
    ``neighbours_dropped`` key, read as 0); scoring a new method of such a seed with the filtered
    probes would mix two Spe definitions in one table.
    """
    stored = int(record.get("neighbours_dropped", 0))
    done = any(entry.get("status") == "ok" for entry in record.get("methods", {}).values())
    if stored == dropped or not done:
        return
    message = (
        f"{path} was scored with {stored} neighbour probe(s) dropped, this run drops {dropped} (neighbour probes "
        "that another case of the batch forgets; seed files from before that filter keep them all)"
    )
    if adding:
        raise BenchConfigError(f"{message}; use another --out or remove it")
    LOG.warning("%s; its stored results are reported as they are", message)


def _pending(record: Mapping[str, Any], methods: Sequence[str], signatures: Mapping[str, str]) -> List[str]:
    """Methods of ``methods`` without a finished, up-to-date entry in ``record``."""
    entries = record.get("methods", {})
    todo = []
    for name in methods:
        entry = entries.get(name)
        if entry and entry.get("status") == "ok" and entry.get("config_sha256") == signatures[name]:
            continue
        if entry and entry.get("status") == "ok":
            LOG.info("%s: stored result was made with another configuration; recomputing", name)
        todo.append(name)
    return todo


def _request_dicts(cases: Sequence[UnlearnCase], requests: Sequence[Mapping[str, Any]], pre, post=None, seconds=None):
    return [
        easyedit_metrics(case.case_id, request, pre[i], post[i] if post is not None else None, time=seconds)
        for i, (case, request) in enumerate(zip(cases, requests))
    ]


class _SeedRun:
    """Everything one run shares across its seeds once the model is loaded.

    A method that raises is recorded with ``status: error`` (and retried on resume); the
    bit-identity check before the next method (and at the end of the seed) still stops the
    bench if the failure left the model changed.
    """

    def __init__(
        self,
        model,
        tok,
        prepared: Mapping[str, PreparedMethod],
        bank: StatsBank,
        fingerprint: ModelFingerprint,
        settings: ScoringSettings,
        signatures: Mapping[str, str],
        descriptions: Mapping[str, Any],
        bar: tqdm,
    ):
        self.model, self.tok = model, tok
        self.retain: List[Dict[str, Any]] = []
        self.named: List[List[bool]] = []  # the seed's neighbour prompts that name a forgotten subject
        self.prepared, self.bank, self.fingerprint = prepared, bank, fingerprint
        self.settings, self.signatures, self.descriptions, self.bar = settings, signatures, descriptions, bar
        self.audit: Any = None  # a BenchAudit with --audit (zerounlearn_editor.harness.audit_columns)
        self.audit_plan: Any = None

    def run(self, seed: int, path: Path, record: Dict[str, Any], cases: List[UnlearnCase], todo: Sequence[str]) -> None:
        requests = [dict(case.request) for case in cases]
        self.retain = list(record.get("retain") or [])
        check_retain_disjoint(self.retain, cases)
        self.named = neighbours_naming_forgotten_subjects(cases)
        self.audit_plan = self.audit.plan(seed, cases, self.tok) if self.audit is not None else None
        with Stage(f"seed {seed}: scoring the unedited model on {len(cases)} cases") as stage:
            pre = score_cases(self.model, self.tok, cases, self.settings.batch_size)
        if "base" in todo:
            self.bar.set_description(f"seed {seed} base")
            with Stage(f"seed {seed}: base perplexity/fluency") as extra:
                more = model_metrics(self.model, self.tok, cases, self.settings)
                audit = self.audit.metrics(self.model, self.tok, self.audit_plan) if self.audit_plan else {}
            metrics = dict(
                probe_metrics(pre, named=self.named),
                ppl=more["ppl"],
                fluency=more["fluency"],
                edit_seconds=None,
                **more.get("utility", {}),
                **more.get("contains", {}),
                **audit,
            )
            record["methods"]["base"] = {
                "status": "ok",
                "config_sha256": BASE_SIGNATURE,
                "metrics": metrics,
                "eval_seconds": stage.seconds + extra.seconds,
                "requests": _request_dicts(cases, requests, pre),
                **({"generations": more["generations"]} if "generations" in more else {}),
            }
            write_json_atomic(path, record)
            self.bar.update(1)
        for name in todo:
            if name == "base":
                continue
            self.bar.set_description(f"seed {seed} {name}")
            record["methods"][name] = self._run_method(seed, name, cases, requests, pre)
            write_json_atomic(path, record)
            self.bar.update(1)
        self.fingerprint.verify(self.model, f"seed {seed}: after restoring {todo[-1]}")

    def _run_method(self, seed: int, name: str, cases, requests, pre) -> Dict[str, Any]:
        method = self.prepared[name]
        entry: Dict[str, Any] = {"config_sha256": self.signatures[name], "config": self.descriptions[name]}
        if method.skip_reason is not None:
            LOG.warning("seed %d: %s %s", seed, name, method.skip_reason)
            return dict(entry, status="skipped", reason=method.skip_reason)
        self.fingerprint.verify(self.model, f"seed {seed}: before {name}")
        try:
            return self._edit_and_score(seed, name, method, entry, cases, requests, pre)
        except Exception as exc:  # noqa: BLE001 - one failing method must not sink a long bench
            LOG.exception("seed %d: %s failed; recorded as an error, continuing with the next method", seed, name)
            return dict(entry, status="error", reason=f"error: {type(exc).__name__}: {exc}")

    def _edit_and_score(
        self, seed: int, name: str, method: PreparedMethod, entry: Dict[str, Any], cases, requests, pre
    ) -> Dict[str, Any]:
        """Edit, score, restore. A failing edit must leave the model as it was (checked next)."""
        with Stage(f"seed {seed}: {name} edit of {len(requests)} requests") as edit_stage:
            extra = {"retain": [dict(r) for r in self.retain]} if method.uses_retain else {}
            outcome = method.edit(self.model, self.tok, [dict(r) for r in requests], self.bank, **extra)
        try:
            with Stage(f"seed {seed}: {name} evaluation") as eval_stage:
                post = score_cases(self.model, self.tok, cases, self.settings.batch_size)
                more = model_metrics(self.model, self.tok, cases, self.settings)
                audit = self.audit.metrics(self.model, self.tok, self.audit_plan) if self.audit_plan else {}
        finally:
            restore_weights(self.model, outcome.weights_copy)
        # a method that reused another's neutral targets is charged their cost: Edit s stays comparable
        edit_seconds = edit_stage.seconds
        if "targets_reused_from" in outcome.details:
            edit_seconds += float(outcome.details["timings"]["targets"])
        metrics = dict(
            probe_metrics(post, pre, self.named),
            ppl=more["ppl"],
            fluency=more["fluency"],
            edit_seconds=edit_seconds,
            **more.get("utility", {}),
            **more.get("contains", {}),
            **audit,
        )
        LOG.info(
            "seed %d: %s Eff %.1f Gen %.1f Spe %.1f PPL %s", seed, name, metrics["eff"], metrics["gen"], metrics["spe"],
            "-" if metrics["ppl"] is None else f"{metrics['ppl']:.2f}",
        )
        entry.update(
            status="ok",
            hparams=method.hparams,
            metrics=metrics,
            eval_seconds=eval_stage.seconds,
            edited_parameters=sorted(outcome.weights_copy),
            details=outcome.details,
            requests=_request_dicts(cases, requests, pre, post, edit_stage.seconds),
        )
        if "generations" in more:
            entry["generations"] = more["generations"]
        return entry


def run_bench(
    config: BenchConfig,
    model: Optional[nn.Module] = None,
    tok: Any = None,
    registry: Optional[Mapping[str, MethodSpec]] = None,
    loader: Optional[ModelLoader] = None,
) -> Dict[str, Any]:
    """Run (or resume) a bench and write its seed files and summary; returns the summary.

    Args:
        config: what to run (see :class:`BenchConfig`).
        model, tok: an already loaded model and tokenizer. Without them the main hparams'
            ``model_name`` is loaded on ``config.device`` by ``loader`` (default
            :func:`~zerounlearn_editor.support.model_zoo.load_model_and_tokenizer`), and only when
            there is work to do.
        registry: methods by name (default :func:`default_registry`).
        loader: ``(model_name, device) -> (model, tok)``.
    """
    with progress_scope(config.progress):
        return _run_bench(config, model, tok, registry, loader)


def _run_bench(config, model, tok, registry, loader) -> Dict[str, Any]:
    started = time.perf_counter()
    config.validate()
    setup = setup_methods(config.methods, config.method_hparams, config.hparams, registry)
    methods, lookup, signatures = setup.names, setup.lookup, setup.signatures
    out = Path(config.out)

    with Stage(f"loading {config.data} cases"):
        all_cases = load_cases(config.data, path=config.data_path)
    pool = list(all_cases)  # retain siblings come from the whole dataset, known or not
    if config.audit is not None:  # e.g. rwku probes asked for on data without RWKU levels: before any model loads
        from zerounlearn_editor.harness.audit_columns import check_audit_data

        check_audit_data(config.audit, all_cases)
    draw = parse_retain_spec(config.retain)
    known: Optional[Dict[str, Any]] = None
    if config.known_only:
        if model is None:
            model, tok = load_model(loader, str(lookup.main.model_name), config.device, config.dtype)
        with Stage("selecting cases the unedited model knows"):
            all_cases = select_known_cases(model, tok, all_cases, None, min_accuracy=config.known_min_accuracy)
        known = {"qualified": len(all_cases), "candidates": len(pool), "min_accuracy": config.known_min_accuracy}
        LOG.info(
            "%d of %d %s cases are known to the model (forget-prompt accuracy >= %g)",
            len(all_cases), len(pool), config.data, config.known_min_accuracy,
        )
        if config.n is not None and len(all_cases) < config.n:
            raise BenchConfigError(
                f"known_only: only {len(all_cases)} {config.data} cases reach forget-prompt accuracy "
                f"{config.known_min_accuracy}, n={config.n} needed (lower known_min_accuracy or n)"
            )
    if config.n is not None and config.n > len(all_cases):
        # record the n actually edited (summary.md, summary.json, seed files), not the one asked for
        LOG.warning("n=%d asked for, but %s has only %d cases: every seed edits all %d", config.n, config.data,
                    len(all_cases), len(all_cases))
        config = dataclasses.replace(config, n=len(all_cases))
    ppl_text = (config.ppl_text or str(default_ppl_text())) if config.ppl_tokens > 0 else None
    run_info = _run_info(config, str(lookup.main.model_name), ppl_text)

    plan: List[Tuple[int, Path, Dict[str, Any], List[UnlearnCase], List[str]]] = []
    for seed in config.seeds:
        cases, dropped = drop_batch_forget_neighbours(sample_cases(all_cases, config.n, seed))
        case_ids = [c.case_id for c in cases]
        path = seed_path(out, seed)
        record: Dict[str, Any]
        retain = draw_retain(draw, cases, pool, seed) if draw else []
        if path.exists():
            record = read_json(path)
            check_stored_run(path, record, run_info, case_ids)
            check_stored_neighbours(path, record, dropped, bool(_pending(record, methods, signatures)))
            if record.get("retain", []) != retain:
                raise BenchConfigError(f"{path} holds another retain set; use another --out or remove it")
        else:
            record = {"seed": seed, "run": run_info, "case_ids": case_ids, "retain": retain, "methods": {}}
        if dropped:
            record["neighbours_dropped"] = dropped  # forgotten by another case of the batch (.neighbours)
        todo = _pending(record, methods, signatures)
        if todo:
            plan.append((seed, path, record, cases, todo))
        else:
            LOG.info("seed %d: all %d methods already done (%s); skipped", seed, len(methods), path)

    if plan:
        if model is None:
            model, tok = load_model(loader, str(lookup.main.model_name), config.device, config.dtype)
        mark_ppl_windows(out, config.seeds, [record for _, _, record, _, _ in plan], tok, ppl_text, seed_path)
        for _, _, record, _, _ in plan:
            record["model_loaded"] = model_basename(model)
        _run_plan(config, model, tok, setup, plan, ppl_text, pool)

    records = {seed: read_json(seed_path(out, seed)) for seed in config.seeds}
    check_one_ppl_layout({seed_path(out, seed): record for seed, record in records.items()})
    summary = write_summary(out, config, run_info, methods, records, known=known)
    LOG.info("bench %s: %d seeds, %d methods in %.1fs -> %s", config.name or out, len(config.seeds), len(methods),
             time.perf_counter() - started, out / "summary.md")
    return summary


def _run_plan(config, model, tok, setup: MethodSetup, plan, ppl_text, pool=()) -> None:
    lookup, signatures, descriptions = setup.lookup, setup.signatures, setup.descriptions
    audit = None
    if config.audit is not None:
        from zerounlearn_editor.harness.audit_columns import BenchAudit

        audit = BenchAudit(config.audit, lookup.main, pool)

    def plan_audit() -> None:  # every seed's probes drawn and length-checked before the statistics
        for seed, _, _, cases, _ in plan:
            audit.plan(seed, cases, tok, model)

    run = prepare_run(setup, model, tok, Path(config.out), [n for *_, todo in plan for n in todo], config.progress,
                      before_statistics=plan_audit if audit is not None else None)
    fingerprint, prepared, bank = run.fingerprint, run.prepared, run.bank
    settings = ScoringSettings(
        config.eval_batch_size,
        ppl_text,
        config.ppl_tokens,
        config.fluency,
        config.fluency_tokens,
        config.utility,
        config.utility_n,
        config.group_generation,
    )
    total = sum(len(todo) for *_, todo in plan)
    measured = ppl_token_count(tok, settings)  # the text may hold fewer tokens than ppl_tokens
    for _, _, record, _, _ in plan:
        record["ppl_tokens_measured"] = measured
    with tqdm(total=total, desc="bench", unit="method", disable=not config.progress) as bar:
        runner = _SeedRun(model, tok, prepared, bank, fingerprint, settings, signatures, descriptions, bar)
        runner.audit = audit
        for seed, path, record, cases, todo in plan:
            with Stage(f"seed {seed}: {len(todo)} method(s)"):
                runner.run(seed, path, record, cases, todo)
