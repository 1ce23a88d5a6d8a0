"""Sequential unlearning: forget ``n`` facts per round for ``R`` rounds on the same model.

``zerounlearn bench ... --rounds R`` (``run_rounds``). Per seed, ``R * n`` cases are drawn
(``sample_cases(cases, R * n, seed)``) and cut into ``R`` consecutive chunks of ``n``; neighbour
probes that any drawn case forgets are dropped, as in the one-batch bench (:mod:`.neighbours`; none
for CounterFact / ZsRE at these sizes). Per method, starting from the unedited model:

* round ``k`` edits chunk ``k`` on the model already edited by rounds ``1..k-1``: the neutral
  targets and the keys are computed on that edited model; the statistics ``C0`` are the ones of
  the unedited model, computed once per run and reused by every round (as in the bench);
* after each round the model is scored: Eff / Gen over **every case forgotten so far**
  (chunks ``1..k``), Spe over those cases' neighbourhood prompts, perplexity;
* then, for comparison, the original weights are restored and all ``R * n`` cases are edited
  as one batch (the row ``batch``), scored and restored; the model is checked bit-identical to
  the unedited one before every method.

Writes ``<out>/rounds_seed_<k>.json`` (atomically after every method), ``rounds_summary.json``,
``rounds.md`` (one table per method: mean ± std over seeds per round) and ``rounds.png``
(Eff, Spe and PPL against the number of facts forgotten) when matplotlib is importable
(:mod:`~zerounlearn_editor.harness.rounds_report`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torch import nn
from tqdm.auto import tqdm

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.harness.bench_config import BenchConfig, BenchConfigError, default_round_methods, parse_methods
from zerounlearn_editor.harness.case_scoring import (
    ScoringSettings,
    model_metrics,
    ppl_token_count,
    probe_metrics,
    score_cases,
)
from zerounlearn_editor.harness.method_rows import default_registry
from zerounlearn_editor.harness.method_specs import (
    HParamsLookup,
    MethodContext,
    MethodSpec,
    known_method_names,
    load_main_hparams,
)
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours
from zerounlearn_editor.harness.report import ppl_tokens_text
from zerounlearn_editor.harness.retain_sets import draw_retain, parse_retain_spec
from zerounlearn_editor.harness.rounds_report import format_rounds, plot_rounds, rounds_markdown, summarize_rounds
from zerounlearn_editor.harness.runner import ModelLoader, check_stored_neighbours
from zerounlearn_editor.harness.stages import Stage, compute_statistics
from zerounlearn_editor.harness.stored_settings import check_one_ppl_layout, check_stored_run, mark_ppl_windows
from zerounlearn_editor.support.files import read_json, sha256_of_json, write_json_atomic, write_text_atomic
from zerounlearn_editor.support.progress import progress_scope

__all__ = ["run_rounds", "rounds_path"]

LOG = logging.getLogger(__name__)


def rounds_path(out: Path, seed: int) -> Path:
    """``<out>/rounds_seed_<seed>.json``."""
    return Path(out) / f"rounds_seed_{seed}.json"


def _score(model, tok, cases: Sequence[UnlearnCase], pre, settings: ScoringSettings, chunk: int = 0) -> Dict[str, Any]:
    """Eff/Gen/Spe over ``cases`` (``pre``: their unedited scores), PPL; ``eff_round`` over the last ``chunk``."""
    post = score_cases(model, tok, cases, settings.batch_size)
    metrics = probe_metrics(post, pre)
    if chunk:
        metrics["eff_round"] = probe_metrics(post[-chunk:])["eff"]
    metrics["ppl"] = model_metrics(model, tok, cases, ScoringSettings(
        settings.batch_size, settings.ppl_text, settings.ppl_tokens))["ppl"]
    return metrics


def _run_method(model, tok, method, bank, cases, chunks, pre, settings, retain, fingerprint, seed) -> Dict[str, Any]:
    """Rounds then the one-batch comparison for one method; the model is restored at the end."""
    fingerprint.verify(model, f"seed {seed}: before {method.name} rounds")
    originals: Dict[str, Any] = {}
    rounds: List[Dict[str, Any]] = []
    extra = {"retain": [dict(r) for r in retain]} if method.uses_retain else {}
    try:
        done = 0
        for k, chunk in enumerate(chunks, start=1):
            requests = [dict(case.request) for case in chunk]
            start = time.perf_counter()
            outcome = method.edit(model, tok, requests, bank, **extra)
            seconds = time.perf_counter() - start
            for name, value in outcome.weights_copy.items():
                originals.setdefault(name, value)  # the weight before round 1
            done += len(chunk)
            metrics = _score(model, tok, cases[:done], pre[:done], settings, chunk=len(chunk))
            metrics["edit_seconds"] = seconds
            rounds.append({"round": k, "forgotten": done, "metrics": metrics})
            LOG.info("seed %d: %s round %d (%d facts forgotten): Eff %.1f Spe %.1f PPL %s", seed, method.name, k, done,
                     metrics["eff"], metrics["spe"], "-" if metrics["ppl"] is None else f"{metrics['ppl']:.2f}")
    finally:
        restore_weights(model, originals)
    fingerprint.verify(model, f"seed {seed}: after restoring {method.name} rounds")
    start = time.perf_counter()
    outcome = method.edit(model, tok, [dict(case.request) for case in cases], bank, **extra)
    seconds = time.perf_counter() - start
    try:
        batch = _score(model, tok, cases, pre, settings)
        batch["edit_seconds"] = seconds
    finally:
        restore_weights(model, outcome.weights_copy)
    fingerprint.verify(model, f"seed {seed}: after restoring {method.name} batch")
    return {"status": "ok", "rounds": rounds, "batch": {"forgotten": len(cases), "metrics": batch}}


def run_rounds(
    config: BenchConfig,
    rounds: int,
    model: Optional[nn.Module] = None,
    tok: Any = None,
    registry: Optional[Mapping[str, MethodSpec]] = None,
    loader: Optional[ModelLoader] = None,
) -> Dict[str, Any]:
    """Run (or resume per method) a sequential-unlearning bench; returns the summary.

    ``config.n`` facts per round, ``rounds`` rounds; ``config.methods`` without ``base``
    (:func:`~zerounlearn_editor.harness.bench_config.default_round_methods` when it lists only ``base``). The other
    settings as in :func:`~zerounlearn_editor.harness.runner.run_bench` (fluency is not measured per round).
    ``config.progress`` False hides every progress bar of the run (as in ``run_bench``).
    """
    with progress_scope(config.progress):
        return _run_rounds(config, rounds, model, tok, registry, loader)


@dataclass
class _Plan:
    """What a rounds run does, checked before any case or model is loaded: the methods (``base`` left out), their
    hyperparameters' lookup and signatures, ``rounds`` x ``n`` facts (``total``) and the output folder."""

    config: BenchConfig
    rounds: int
    registry: Dict[str, MethodSpec]
    methods: List[str]
    lookup: HParamsLookup
    signatures: Dict[str, str]

    @property
    def total(self) -> int:
        return self.rounds * self.config.n

    @property
    def out(self) -> Path:
        return Path(self.config.out)

    @classmethod
    def of(cls, config: BenchConfig, rounds: int, registry: Optional[Mapping[str, MethodSpec]]) -> "_Plan":
        """Check ``config`` and ``rounds`` and resolve the methods (``registry`` default: the bench's rows)."""
        config.validate()
        if rounds < 1:
            raise BenchConfigError(f"rounds must be >= 1, got {rounds}")
        if config.n is None:
            raise BenchConfigError("rounds need n (facts per round)")
        registry = dict(registry) if registry is not None else default_registry()
        methods = [m for m in parse_methods(config.methods, known_method_names(registry)) if m != "base"]
        methods = methods or default_round_methods()
        main_path = Path(config.hparams)
        lookup = HParamsLookup(main_path, load_main_hparams(str(main_path)), dict(config.method_hparams))
        signatures = {name: sha256_of_json(registry[name].describe(lookup)) for name in methods}
        return cls(config, rounds, registry, methods, lookup, signatures)


class _Model:
    """The model and tokenizer, given or loaded on first use (with ``loader``, default the model zoo's)."""

    def __init__(self, model: Optional[nn.Module], tok: Any, loader: Optional[ModelLoader], name: str, device: str):
        self.model, self.tok, self.loader, self.name, self.device = model, tok, loader, name, device

    def load(self) -> Tuple[nn.Module, Any]:
        if self.model is None:
            loader = self.loader
            if loader is None:
                from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer as loader
            with Stage(f"loading model {self.name}"):
                self.model, self.tok = loader(self.name, self.device)
        return self.model, self.tok


def _cases_to_draw(plan: _Plan, model: _Model, all_cases: Sequence[UnlearnCase]) -> Sequence[UnlearnCase]:
    """The cases the seeds draw from: ``all_cases``, or with ``known_only`` the known ones (the model loaded for
    it); too few for ``rounds`` x ``n`` is an error."""
    config = plan.config
    if config.known_only:
        loaded, tok = model.load()
        all_cases = select_known_cases(loaded, tok, all_cases, None, min_accuracy=config.known_min_accuracy)
    if len(all_cases) < plan.total:
        raise BenchConfigError(
            f"{plan.rounds} rounds x {config.n} facts need {plan.total} cases; {config.data} has {len(all_cases)}"
            + (" known ones" if config.known_only else "")
        )
    return all_cases


def _seed_work(plan: _Plan, all_cases, pool, draw, run_info: Mapping[str, Any]) -> List[Tuple[Any, ...]]:
    """Per seed with a method still to run: ``(seed, path, record, cases, retain, todo)`` (``retain``: the seed's
    draw of ``pool`` by ``draw``); the stored seed file (if any) is checked against the run (settings, cases,
    neighbours dropped)."""
    config = plan.config
    work = []
    for seed in config.seeds:
        cases, dropped = drop_batch_forget_neighbours(sample_cases(all_cases, plan.total, seed))
        retain = draw_retain(draw, cases, pool, seed) if draw else []
        path = rounds_path(plan.out, seed)
        record = (
            read_json(path)
            if path.exists()
            else {
                "seed": seed,
                "run": run_info,
                "case_ids": [c.case_id for c in cases],
                "neighbours_dropped": dropped,
                "retain": retain,
                "methods": {},
            }
        )
        check_stored_run(path, record, run_info, [c.case_id for c in cases])
        todo = [m for m in plan.methods if not (record["methods"].get(m, {}).get("status") == "ok"
                                                and record["methods"][m].get("config_sha256") == plan.signatures[m])]
        check_stored_neighbours(path, record, dropped, adding=bool(todo))
        record["neighbours_dropped"] = dropped
        if todo:
            work.append((seed, path, record, cases, retain, todo))
    return work


def _run_work(
    plan: _Plan, model: nn.Module, tok: Any, work: Sequence[Tuple[Any, ...]], ppl_text: Optional[str]
) -> None:
    """Every method still to run of every seed: the unedited scores, then rounds and one batch per method, the seed
    file written after each method."""
    config, total = plan.config, plan.total
    mark_ppl_windows(plan.out, config.seeds, [record for _, _, record, *_ in work], tok, ppl_text, rounds_path)
    fingerprint = ModelFingerprint.of(model)
    settings = ScoringSettings(config.eval_batch_size, ppl_text, config.ppl_tokens)
    neutral = plan.lookup.main.neutral_target or tok.eos_token or ""
    needed = list(dict.fromkeys(m for *_, todo in work for m in todo))
    # one context per method: shared neutral targets are only valid on the unedited model
    prepared = {m: plan.registry[m].prepare(MethodContext(plan.lookup, model, tok, plan.out, neutral)) for m in needed}
    bank = compute_statistics(model, tok, plan.lookup, list(prepared.values()), config.progress)
    with tqdm(total=sum(len(w[-1]) for w in work), desc="rounds", unit="method", disable=not config.progress) as bar:
        for seed, path, record, cases, retain, todo in work:
            chunks = [cases[i: i + config.n] for i in range(0, total, config.n)]
            with Stage(f"seed {seed}: scoring the unedited model on {total} cases"):
                pre = score_cases(model, tok, cases, config.eval_batch_size)
                base = dict(probe_metrics(pre, pre), ppl=model_metrics(model, tok, cases, settings)["ppl"])
            record["base"] = {"forgotten": 0, "metrics": base}
            record["ppl_tokens_measured"] = ppl_token_count(tok, settings)  # fewer than ppl_tokens: a short text
            for name in todo:
                bar.set_description(f"seed {seed} {name}")
                method = prepared[name]
                if method.skip_reason is not None:
                    record["methods"][name] = {"status": "skipped", "reason": method.skip_reason}
                else:
                    with Stage(f"seed {seed}: {name}, {plan.rounds} rounds of {config.n} + one batch of {total}"):
                        entry = _run_method(
                            model, tok, method, bank, cases, chunks, pre, settings, retain, fingerprint, seed
                        )
                    record["methods"][name] = dict(entry, config_sha256=plan.signatures[name])
                write_json_atomic(path, record)
                bar.update(1)


def _write_summary(plan: _Plan, run_info: Mapping[str, Any]) -> Dict[str, Any]:
    """``rounds_summary.json``, ``rounds.md`` and ``rounds.png`` from every seed file; returns the summary."""
    config, out = plan.config, plan.out
    records = {seed: read_json(rounds_path(out, seed)) for seed in config.seeds}
    check_one_ppl_layout({rounds_path(out, seed): record for seed, record in records.items()})
    summary = summarize_rounds(plan.methods, records, plan.rounds, config.n)
    summary.update(hparams=config.hparams, data=config.data, seeds=list(config.seeds), run=run_info)
    if config.ppl_tokens > 0:
        summary["ppl_tokens_measured"] = ppl_tokens_text(records.values(), config.ppl_tokens)
    summary["table_markdown"] = format_rounds(summary)
    write_json_atomic(out / "rounds_summary.json", summary)
    title = config.name or f"{config.data}, {plan.rounds} rounds x {config.n} facts"
    write_text_atomic(out / "rounds.md", rounds_markdown(title, config, run_info, summary))
    plot = plot_rounds(summary, out / "rounds.png")
    if plot:
        summary["plot"] = str(plot)
    return summary


def _run_rounds(
    config: BenchConfig,
    rounds: int,
    model: Optional[nn.Module],
    tok: Any,
    registry: Optional[Mapping[str, MethodSpec]],
    loader: Optional[ModelLoader],
) -> Dict[str, Any]:
    """:func:`run_rounds` inside its progress scope."""
    started = time.perf_counter()
    plan = _Plan.of(config, rounds, registry)
    holder = _Model(model, tok, loader, str(plan.lookup.main.model_name), config.device)
    with Stage(f"loading {config.data} cases"):
        all_cases = load_cases(config.data, path=config.data_path)
    pool = list(all_cases)
    draw = parse_retain_spec(config.retain)
    all_cases = _cases_to_draw(plan, holder, all_cases)
    ppl_text = (config.ppl_text or str(default_ppl_text())) if config.ppl_tokens > 0 else None
    run_info = _run_info(config, rounds, str(plan.lookup.main.model_name), ppl_text)
    work = _seed_work(plan, all_cases, pool, draw, run_info)
    if work:
        _run_work(plan, *holder.load(), work, ppl_text)
    summary = _write_summary(plan, run_info)
    LOG.info("rounds bench: %d seeds, %d methods in %.1fs -> %s", len(config.seeds), len(plan.methods),
             time.perf_counter() - started, plan.out / "rounds.md")
    return summary


def _run_info(config: BenchConfig, rounds: int, model_name: str, ppl_text: Optional[str]) -> Dict[str, Any]:
    """The settings every stored seed file must share with this run."""
    return {"data": config.data, "data_path": config.data_path, "n": config.n, "rounds": rounds, "model": model_name,
            "ppl_tokens": config.ppl_tokens, "ppl_text": Path(ppl_text).name if ppl_text else None,
            "known_only": config.known_only,
            "known_min_accuracy": config.known_min_accuracy if config.known_only else None, "retain": config.retain}
