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
(Eff, Spe and PPL against the number of facts forgotten) when matplotlib is importable.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from torch import nn
from tqdm.auto import tqdm

from zerounlearn_editor.bench.case_scoring import (
    ScoringSettings,
    model_metrics,
    ppl_token_count,
    probe_metrics,
    score_cases,
)
from zerounlearn_editor.bench.config import BenchConfig, BenchConfigError, default_round_methods, parse_methods
from zerounlearn_editor.bench.fingerprint import ModelFingerprint
from zerounlearn_editor.bench.method_rows import default_registry
from zerounlearn_editor.bench.method_specs import (
    HParamsLookup,
    MethodContext,
    MethodSpec,
    known_method_names,
    load_main_hparams,
)
from zerounlearn_editor.bench.neighbours import drop_batch_forget_neighbours
from zerounlearn_editor.bench.report import aggregate, ppl_tokens_text
from zerounlearn_editor.bench.retain_sets import draw_retain, parse_retain_spec
from zerounlearn_editor.bench.runner import ModelLoader, check_stored_neighbours
from zerounlearn_editor.bench.stages import Stage, compute_statistics
from zerounlearn_editor.bench.stored_settings import check_stored_run
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.support.files import read_json, sha256_of_json, write_json_atomic, write_text_atomic
from zerounlearn_editor.support.plotting import pyplot, save_figure
from zerounlearn_editor.support.progress import progress_scope

__all__ = ["ROUND_METRICS", "run_rounds", "rounds_path", "format_rounds"]

LOG = logging.getLogger(__name__)

ROUND_METRICS = (
    ("eff", "Eff ↓", "{:.1f}"),
    ("gen", "Gen ↓", "{:.1f}"),
    ("spe", "Spe ↑", "{:.1f}"),
    ("ppl", "PPL ↓", "{:.2f}"),
    ("eff_round", "Eff this round ↓", "{:.1f}"),
    ("edit_seconds", "Edit s", "{:.1f}"),
)


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
    (:func:`~zerounlearn_editor.bench.config.default_round_methods` when it lists only ``base``). The other
    settings as in :func:`~zerounlearn_editor.bench.runner.run_bench` (fluency is not measured per round).
    ``config.progress`` False hides every progress bar of the run (as in ``run_bench``).
    """
    with progress_scope(config.progress):
        return _run_rounds(config, rounds, model, tok, registry, loader)


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
    config.validate()
    if rounds < 1:
        raise BenchConfigError(f"rounds must be >= 1, got {rounds}")
    if config.n is None:
        raise BenchConfigError("rounds need n (facts per round)")
    registry = dict(registry) if registry is not None else default_registry()
    methods = [m for m in parse_methods(config.methods, known_method_names(registry)) if m != "base"]
    methods = methods or default_round_methods()
    out = Path(config.out)
    main_path = Path(config.hparams)
    lookup = HParamsLookup(main_path, load_main_hparams(str(main_path)), dict(config.method_hparams))
    signatures = {name: sha256_of_json(registry[name].describe(lookup)) for name in methods}
    total = rounds * config.n

    with Stage(f"loading {config.data} cases"):
        all_cases = load_cases(config.data, path=config.data_path)
    pool = list(all_cases)
    draw = parse_retain_spec(config.retain)

    def load():
        nonlocal model, tok, loader
        if model is None:
            if loader is None:
                from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer as loader
            with Stage(f"loading model {lookup.main.model_name}"):
                model, tok = loader(str(lookup.main.model_name), config.device)

    if config.known_only:
        load()
        all_cases = select_known_cases(model, tok, all_cases, None, min_accuracy=config.known_min_accuracy)
    if len(all_cases) < total:
        raise BenchConfigError(
            f"{rounds} rounds x {config.n} facts need {total} cases; {config.data} has {len(all_cases)}"
            + (" known ones" if config.known_only else "")
        )
    ppl_text = (config.ppl_text or str(default_ppl_text())) if config.ppl_tokens > 0 else None
    run_info = _run_info(config, rounds, str(lookup.main.model_name), ppl_text)

    plan = []
    for seed in config.seeds:
        cases, dropped = drop_batch_forget_neighbours(sample_cases(all_cases, total, seed))
        retain = draw_retain(draw, cases, pool, seed) if draw else []
        path = rounds_path(out, seed)
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
        todo = [m for m in methods if not (record["methods"].get(m, {}).get("status") == "ok"
                                           and record["methods"][m].get("config_sha256") == signatures[m])]
        check_stored_neighbours(path, record, dropped, adding=bool(todo))
        record["neighbours_dropped"] = dropped
        if todo:
            plan.append((seed, path, record, cases, retain, todo))

    if plan:
        load()
        fingerprint = ModelFingerprint.of(model)
        settings = ScoringSettings(config.eval_batch_size, ppl_text, config.ppl_tokens)
        neutral = lookup.main.neutral_target or tok.eos_token or ""
        needed = list(dict.fromkeys(m for *_, todo in plan for m in todo))
        # one context per method: shared neutral targets are only valid on the unedited model
        prepared = {m: registry[m].prepare(MethodContext(lookup, model, tok, out, neutral)) for m in needed}
        bank = compute_statistics(model, tok, lookup, list(prepared.values()), config.progress)
        with tqdm(
            total=sum(len(p[-1]) for p in plan), desc="rounds", unit="method", disable=not config.progress
        ) as bar:
            for seed, path, record, cases, retain, todo in plan:
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
                        with Stage(f"seed {seed}: {name}, {rounds} rounds of {config.n} + one batch of {total}"):
                            entry = _run_method(
                                model, tok, method, bank, cases, chunks, pre, settings, retain, fingerprint, seed
                            )
                        record["methods"][name] = dict(entry, config_sha256=signatures[name])
                    write_json_atomic(path, record)
                    bar.update(1)

    records = {seed: read_json(rounds_path(out, seed)) for seed in config.seeds}
    summary = summarize_rounds(methods, records, rounds, config.n)
    summary.update(hparams=config.hparams, data=config.data, seeds=list(config.seeds), run=run_info)
    if config.ppl_tokens > 0:
        summary["ppl_tokens_measured"] = ppl_tokens_text(records.values(), config.ppl_tokens)
    summary["table_markdown"] = format_rounds(summary)
    write_json_atomic(out / "rounds_summary.json", summary)
    title = config.name or f"{config.data}, {rounds} rounds x {config.n} facts"
    write_text_atomic(out / "rounds.md", _markdown(title, config, run_info, summary))
    plot = plot_rounds(summary, out / "rounds.png")
    if plot:
        summary["plot"] = str(plot)
    LOG.info("rounds bench: %d seeds, %d methods in %.1fs -> %s", len(config.seeds), len(methods),
             time.perf_counter() - started, out / "rounds.md")
    return summary


def summarize_rounds(
    methods: Sequence[str], records: Mapping[int, Mapping[str, Any]], rounds: int, n: int
) -> Dict[str, Any]:
    """Mean/std over seeds of every metric, per method and round (round 0 = unedited, ``batch``)."""
    keys = [k for k, _, _ in ROUND_METRICS]

    def agg(entries: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
        return {k: a for k in keys if (a := aggregate([e["metrics"].get(k) for e in entries])) is not None}

    bases = [r["base"] for r in records.values() if "base" in r]
    out: Dict[str, Any] = {"rounds": rounds, "n": n, "base": agg(bases), "methods": {}}
    for name in methods:
        entries = [r["methods"].get(name) for r in records.values()]
        ok = [e for e in entries if e and e.get("status") == "ok"]
        item: Dict[str, Any] = {"seeds": len(ok), "rounds": [], "batch": None}
        if ok:
            item["rounds"] = [
                {"round": k + 1, "forgotten": (k + 1) * n, "metrics": agg([e["rounds"][k] for e in ok])}
                for k in range(rounds)
            ]
            item["batch"] = {"forgotten": rounds * n, "metrics": agg([e["batch"] for e in ok])}
        else:
            item["reason"] = "; ".join(sorted({e.get("reason", "no result") for e in entries if e})) or "no result"
        out["methods"][name] = item
    return out


def _cell(stats: Optional[Mapping[str, Any]], fmt: str) -> str:
    if not stats:
        return "-"
    return fmt.format(stats["mean"]) + (f" ± {fmt.format(stats['std'])}" if stats["n"] > 1 else "")


def format_rounds(summary: Mapping[str, Any]) -> str:
    """One markdown table per method: rows = rounds (+ unedited, + one batch of all facts)."""
    lines: List[str] = []
    header = "| Round | Facts forgotten | " + " | ".join(h for _, h, _ in ROUND_METRICS) + " |"
    rule = "|---|---|" + "---|" * len(ROUND_METRICS)
    for name, item in summary["methods"].items():
        lines += [f"### {name}", ""]
        if not item["rounds"]:
            lines += [f"no result: {item.get('reason')}", ""]
            continue
        lines += [header, rule]
        rows = [("0 (unedited)", 0, summary["base"])] + [
            (str(r["round"]), r["forgotten"], r["metrics"]) for r in item["rounds"]
        ]
        rows.append(
            (f"one batch of {item['batch']['forgotten']}", item["batch"]["forgotten"], item["batch"]["metrics"])
        )
        for label, forgotten, metrics in rows:
            lines.append(
                f"| {label} | {forgotten} | " + " | ".join(_cell(metrics.get(k), f) for k, _, f in ROUND_METRICS) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def _run_info(config: BenchConfig, rounds: int, model_name: str, ppl_text: Optional[str]) -> Dict[str, Any]:
    """The settings every stored seed file must share with this run."""
    return {"data": config.data, "data_path": config.data_path, "n": config.n, "rounds": rounds, "model": model_name,
            "ppl_tokens": config.ppl_tokens, "ppl_text": Path(ppl_text).name if ppl_text else None,
            "known_only": config.known_only,
            "known_min_accuracy": config.known_min_accuracy if config.known_only else None, "retain": config.retain}


def _markdown(title: str, config: BenchConfig, run_info: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    table, ppl_tokens = summary["table_markdown"], summary.get("ppl_tokens_measured")
    return "\n".join(
        [
            f"# Sequential unlearning: {title}",
            "",
            f"- model: `{run_info['model']}`, hparams: `{config.hparams}`, data: `{config.data}`, seeds "
            f"{list(config.seeds)}",
            f"- {run_info['rounds']} rounds of n = {config.n} facts, each edited on the model left by the previous "
            "rounds "
            "(targets and keys from the edited model, C0 of the unedited model reused); `one batch` = all facts in one "
            "edit",
            "- Eff / Gen: token accuracy (%) of the true answers of every fact forgotten so far (lower = more "
            "forgotten); "
            "Spe: of those facts' neighbourhood prompts (higher = better kept); Eff this round: the round's own facts; "
            + (
                f"PPL on the first {ppl_tokens or config.ppl_tokens} tokens of {run_info['ppl_text']}"
                if config.ppl_tokens
                else "no PPL"
            ),
            "",
            table,
        ]
    )


def plot_rounds(summary: Mapping[str, Any], path: Path) -> Optional[Path]:
    """Eff, Spe and PPL against facts forgotten, one line per method (dashed marker: one batch); ``None``
    without matplotlib."""
    plt = pyplot('the rounds plot')
    if plt is None:
        return None
    panels = [(k, h) for k, h, _ in ROUND_METRICS if k in ("eff", "spe", "ppl") and k in summary["base"]]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6))
    axes = list(axes) if len(panels) > 1 else [axes]
    for ax, (key, header) in zip(axes, panels):
        for name, item in summary["methods"].items():
            if not item["rounds"]:
                continue
            xs = [0] + [r["forgotten"] for r in item["rounds"]]
            ys = [summary["base"][key]["mean"]] + [
                r["metrics"].get(key, {}).get("mean", float("nan")) for r in item["rounds"]
            ]
            (line,) = ax.plot(xs, ys, marker="o", label=name)
            batch = item["batch"]["metrics"].get(key)
            if batch:
                ax.plot([item["batch"]["forgotten"]], [batch["mean"]], marker="*", markersize=12, linestyle="none",
                        color=line.get_color(), label=f"{name}, one batch")
        ax.set_xlabel("facts forgotten")
        ax.set_title(header)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
