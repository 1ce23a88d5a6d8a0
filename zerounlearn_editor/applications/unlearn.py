"""``zerounlearn unlearn``: forget the facts of a file, show the effect, save the model or an adapter.

The facts file is a JSON / JSONL / YAML list of ``{"prompt", "subject", "answer"}`` mappings (``answer``
optional, only scored; ``target_new`` optional: a neutral target other than the YAML's); the method is
the hparams file's ``alg_name``. Results: a before/after table (teacher-forced answer accuracy and
probability, greedy continuation) of the forgotten facts and of the retain facts with answers, the
perplexity change, and in ``--out`` the edited model (``--save model``) or a PEFT LoRA adapter of the
edit (``--save adapter``, :func:`~zerounlearn_editor.integrations.adapters.export_lora_adapter`), and
always :data:`REPORT_NAME`. Every input is checked before the model is loaded, the edit's own checks
run before the facts are scored, and ``--out`` is written through a staging folder
(:mod:`zerounlearn_editor.support.output_dir`): it holds one run's files, whole, or is as it was.
With ``--save model`` or ``adapter`` the folder also holds a ledger of every fact forgotten so far and the
carried state of lifelong unlearning (:mod:`zerounlearn_editor.applications.ledger`); ``--model`` a folder
with a ledger continues from it.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from zerounlearn_editor.applications.ledger import LEDGER_NAME, build_ledger, read_continuation, write_ledger
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.record_files import RecordFileError, read_record_list, require_fields
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.contexts import check_fewshot_facts
from zerounlearn_editor.engine.forgotten_state import attach_state
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import EditReport, check_edit_inputs
from zerounlearn_editor.engine.requests import RequestError, check_targets_not_answers, normalize_requests
from zerounlearn_editor.engine.retain import load_retain_file
from zerounlearn_editor.evaluation.audit import LensConfig, build_plan, score_model
from zerounlearn_editor.evaluation.audit.facts_audit import (
    check_probe_fields,
    facts_items,
    facts_pool,
    format_facts_audit,
    generic_passages,
)
from zerounlearn_editor.evaluation.audit.plan import check_audit_inputs, check_plan_lengths
from zerounlearn_editor.evaluation.generation import generate_greedy
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.integrations.adapters import AdapterReport, export_lora_adapter
from zerounlearn_editor.methods.registry import get_method, load_method
from zerounlearn_editor.support.model_access import max_positions
from zerounlearn_editor.support.output_dir import check_free_space, check_output_dir, staged_output_dir
from zerounlearn_editor.support.progress import progress_scope

LOG = logging.getLogger(__name__)

SAVE_MODES = ("model", "adapter", "none")
_FACT_FIELDS = ("prompt", "subject", "answer", "ground_truth", "target_new", "paraphrases", "questions")
REPORT_NAME = "unlearn_report.json"
_NEW_TOKENS = 8  # greedy continuation length in the table
_BATCH_SIZE = 16


def load_facts(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """Edit requests from a facts file; errors name the file, record index and field."""
    records = read_record_list(path, what="facts to forget")
    require_fields(records, ("prompt", "subject"), path)
    requests = []
    for index, record in enumerate(records):
        unknown = sorted(set(record) - set(_FACT_FIELDS))
        if unknown:
            raise RecordFileError(f"{path}: record {index}: unknown field(s) {unknown} "
                                  "(allowed: prompt, subject, answer, target_new, paraphrases, questions)")
        check_probe_fields(record, index, path)
        if "answer" in record and "ground_truth" in record:
            raise RecordFileError(f"{path}: record {index}: give 'answer' or 'ground_truth', not both")
        answer = record.get("answer", record.get("ground_truth"))
        if answer is not None and (not isinstance(answer, str) or not answer.strip()):
            raise RecordFileError(f"{path}: record {index}: field 'answer' must be a non-empty string, got {answer!r}")
        target = record.get("target_new")
        if target is not None and not isinstance(target, str):  # a list or {"str": ...} would be read in part
            raise RecordFileError(
                f"{path}: record {index}: field 'target_new' must be a string (\"\" = the YAML's neutral target), "
                f"got {type(target).__name__} {target!r}"
            )
        if record["subject"] not in record["prompt"]:
            raise RecordFileError(
                f"{path}: record {index}: field 'subject' {record['subject']!r} does not occur in the prompt "
                f"{record['prompt']!r}"
            )
        request = {"prompt": record["prompt"], "subject": record["subject"], "ground_truth": answer}
        if "target_new" in record:
            request["target_new"] = record["target_new"]
        requests.append(request)
    return requests


@dataclass
class UnlearnRow:
    prompt: str
    answer: Optional[str]
    acc_before: Optional[float]
    acc_after: Optional[float]
    prob_before: Optional[float]
    prob_after: Optional[float]
    greedy_before: str
    greedy_after: str


@dataclass
class UnlearnResult:
    method: str
    forgotten: List[UnlearnRow]
    kept: List[UnlearnRow]
    ppl_before: Optional[float]
    ppl_after: Optional[float]
    ppl_tokens: int
    seconds: Dict[str, float] = field(default_factory=dict)
    saved: Dict[str, Any] = field(default_factory=dict)
    audit: Optional[Dict[str, Any]] = None
    fluency: Dict[str, Any] = field(default_factory=dict)  # the edit's fluency guard (EditReport.fluency)
    saved_ledger: Optional[Dict[str, int]] = None  # the ledger written: facts forgotten so far, edits
    # indices into ``forgotten`` (one row per edited fact) whose answer is still given after the edit (acc after 1.0)
    still_answered: List[int] = field(default_factory=list)


def _measure(model, tok, facts: Sequence[Dict[str, Any]]) -> Dict[str, List[Any]]:
    with_answer = [i for i, f in enumerate(facts) if f.get("ground_truth")]
    probes = [Probe(facts[i]["prompt"], facts[i]["ground_truth"]) for i in with_answer]
    scores = evaluate_probes(model, tok, probes, _BATCH_SIZE)
    acc: List[Optional[float]] = [None] * len(facts)
    prob: List[Optional[float]] = [None] * len(facts)
    for j, i in enumerate(with_answer):
        acc[i], prob[i] = scores["acc"][j], scores["prob"][j]
    greedy = generate_greedy(model, tok, [f["prompt"] for f in facts], _NEW_TOKENS, _BATCH_SIZE)
    return {"acc": acc, "prob": prob, "greedy": greedy}


def _rows(facts, before, after) -> List[UnlearnRow]:
    return [
        UnlearnRow(f["prompt"], f.get("ground_truth"), before["acc"][i], after["acc"][i], before["prob"][i],
                   after["prob"][i], before["greedy"][i], after["greedy"][i])
        for i, f in enumerate(facts)
    ]


def run_unlearn(
    hparams_file: Union[str, Path],
    facts_file: Union[str, Path],
    out_dir: Optional[Union[str, Path]],
    retain_file: Optional[Union[str, Path]] = None,
    save: str = "adapter",
    model_name: Optional[str] = None,
    device: str = "cpu",
    dtype: Optional[str] = None,
    corpus: Optional[str] = None,
    ppl_tokens: int = 2000,
    ppl_text: Optional[Union[str, Path]] = None,
    progress: bool = True,
    audit: Optional[Any] = None,
    fluency_guard: Optional[str] = None,
) -> UnlearnResult:
    """Unlearn the facts of ``facts_file`` and save the result (see module docstring).

    ``ppl_tokens`` tokens of ``ppl_text`` (default: the WikiText-2 test split shipped with the package)
    give the perplexity before/after (0: off). ``progress=False`` hides every bar. ``audit`` (an
    :class:`~zerounlearn_editor.evaluation.audit.AuditSettings`) adds the robustness audit of the facts
    (:mod:`zerounlearn_editor.evaluation.audit.facts_audit`) to the report. ``fluency_guard`` (``"warn"``
    for ``--allow-fluency-loss``) overrides the YAML's fluency guard.
    """
    with progress_scope(progress):
        from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer  # late: tests patch it

        if save not in SAVE_MODES:
            raise ValueError(f"--save must be one of {SAVE_MODES}, got {save!r}")
        if save != "none" and out_dir is None:
            raise ValueError(f"--save {save} needs --out")
        if isinstance(ppl_tokens, bool) or not isinstance(ppl_tokens, int) or ppl_tokens < 0:
            raise ValueError(f"--ppl-tokens must be an integer >= 0 (0 = no perplexity), got {ppl_tokens!r}")
        if out_dir is not None:
            check_output_dir(out_dir, (REPORT_NAME,))
        hparams, apply = load_method(hparams_file)
        continuation = read_continuation(model_name or hparams.model_name, hparams)  # a ledger: checked before loading
        facts = load_facts(facts_file)
        fewshot = int(hparams.experimental.get("fewshot_contexts", 0))
        if fewshot:  # a deep YAML's few-shot facts are planned from the facts alone, before the model loads
            check_fewshot_facts(normalize_requests(facts), fewshot)
        try:  # a neutral target that is the answer would teach the fact: refused before the model loads
            check_targets_not_answers(normalize_requests(facts), hparams.neutral_target)
        except RequestError as exc:
            raise RecordFileError(f"{facts_file}: {str(exc).replace('request ', 'record ', 1)}") from None
        if retain_file:
            load_retain_file(retain_file)  # errors name the file, record and field
            if not any(v > 0 for v in hparams.retain_weights().values()):
                raise HParamsError(
                    f"--retain given, but the retain weights {sorted(hparams.retain_weights())} of "
                    f"{hparams_file} are all 0 (the paper's method ignores a retain set); use a retain-aware "
                    "YAML, e.g. hparams/ZeroUnlearn-GD/<model>-retain.yaml"
                )
        retain_records = read_record_list(retain_file, what="retain facts") if retain_file else []
        answers = [(r["prompt"], r.get("answer", r.get("ground_truth"))) for r in retain_records]
        retain_facts = [{"prompt": q, "ground_truth": a} for q, a in answers
                        if isinstance(a, str) and a.strip()]
        audit_items: List[Any] = []
        if audit is not None:
            audit.validate()
            audit_items = facts_items(facts_file)
            if not audit_items:
                raise RecordFileError(f"{facts_file}: --audit needs facts with an 'answer'; none has one")
            passages = generic_passages(corpus or hparams.mom2_dataset) if "relearning" in audit.families else []
            audit_pool = facts_pool(retain_records)
            check_audit_inputs(audit_items, audit_pool, audit, passages)  # before any work
        seconds: Dict[str, float] = {}

        start = time.perf_counter()
        name = model_name or hparams.model_name
        model, tok = load_model_and_tokenizer(name, device=device, dtype=dtype)
        seconds["load"] = time.perf_counter() - start
        second_moments = None
        if continuation is not None:  # the folder's weights, the base model's C0, the state of earlier edits
            second_moments = continuation.check_model(model, hparams, corpus)
            attach_state(model, continuation.state_for(model))
        # the edit's checks (hparams, requests, retain set, modules, lengths, capacity) before any scoring
        plan = check_edit_inputs(model, tok, facts, hparams, str(retain_file) if retain_file else None)
        check_requests = get_method(hparams.alg_name).check_requests
        if check_requests is not None:  # e.g. ZeroUnlearn's capacity limit
            check_requests(model, hparams, len(plan.forget))
        if audit is not None:  # the probes of the facts the edit keeps (a repeated fact once), drawn before the edit
            edited = {str(r.index) for r in plan.forget}
            audit_plan = build_plan([i for i in audit_items if i.case_id in edited], audit_pool, tok, audit, passages)
            check_plan_lengths(audit_plan, tok, max_positions(model))
        if out_dir is not None and save == "model":
            check_free_space(out_dir, sum(p.numel() * p.element_size() for p in model.parameters()))
        text = Path(ppl_text) if ppl_text and ppl_tokens > 0 else None
        if ppl_tokens > 0 and not ppl_text:  # the WikiText-2 test split shipped with the package
            try:
                text = Path(default_ppl_text())
            except OSError as exc:
                LOG.warning("no perplexity text: %s; perplexity skipped (give --ppl-text)", exc)

        start = time.perf_counter()
        LOG.info("scoring %d facts (and %d retain facts) before the edit", len(facts), len(retain_facts))
        forget_before = _measure(model, tok, facts)
        kept_before = _measure(model, tok, retain_facts) if retain_facts else None
        ppl_before = perplexity(model, tok, text, max_tokens=ppl_tokens) if text else None
        seconds["evaluate_before"] = time.perf_counter() - start
        if audit is not None:  # the probes are drawn once, before the edit
            start = time.perf_counter()
            lens = LensConfig(hparams.layers[0], hparams.layer_module_tmp, hparams.ln_f_module)
            audit_before = score_model(model, tok, audit_plan, audit, lens)
            seconds["audit_before"] = time.perf_counter() - start

        report = EditReport()
        start = time.perf_counter()
        LOG.info("unlearning %d facts with %s (layers %s)", len(facts), hparams.alg_name, hparams.layers)
        model, weights_copy = apply(  # the plan is not checked again
            model, tok, plan, hparams, return_orig_weights=True, report=report, progress=progress, corpus=corpus,
            retain=str(retain_file) if retain_file else None, fluency_guard=fluency_guard,
            second_moments=second_moments, track_forgotten=True)
        if report.fluency:
            guard = report.fluency
            LOG.info("fluency guard: perplexity %.3f -> %.3f (%+.1f%%) on %d tokens of the built-in text",
                     guard["ppl_before"], guard["ppl_after"], 100 * guard["increase"], guard["tokens"])
        seconds["unlearn"] = time.perf_counter() - start
        seconds.update({f"unlearn.{k}": v for k, v in report.timings.items()})

        start = time.perf_counter()
        forget_after = _measure(model, tok, facts)
        kept_after = _measure(model, tok, retain_facts) if retain_facts else None
        ppl_after = perplexity(model, tok, text, max_tokens=ppl_tokens) if text else None
        seconds["evaluate_after"] = time.perf_counter() - start
        audit_report = None
        if audit is not None:
            start = time.perf_counter()
            audit_report = {"settings": audit.to_dict(), "plan": audit_plan.describe(),
                            "before": audit_before, "after": score_model(model, tok, audit_plan, audit, lens)}
            seconds["audit_after"] = time.perf_counter() - start

        result = UnlearnResult(
            method=hparams.alg_name,
            forgotten=_rows(facts, forget_before, forget_after),
            kept=_rows(retain_facts, kept_before, kept_after) if retain_facts else [],
            ppl_before=ppl_before,
            ppl_after=ppl_after,
            ppl_tokens=ppl_tokens if text else 0,
            seconds=seconds,
            audit=audit_report,
            fluency=dict(report.fluency),
            still_answered=[i for i, acc in enumerate(forget_after["acc"]) if acc == 1.0],
        )
        if out_dir is not None:
            ledger = None
            if save != "none":
                ledger = (build_ledger(continuation, model, weights_copy, hparams, hparams_file, facts_file, facts,
                                       name, corpus, save), report.forgotten)
                result.saved_ledger = {"facts": len(ledger[0]["facts"]), "edits": len(ledger[0]["edits"])}
            with staged_output_dir(out_dir) as staging:
                _save(result, staging, Path(out_dir), save, model, tok, weights_copy, hparams, hparams_file,
                      facts_file, retain_file, facts, name)
                if ledger is not None:  # inside the staging folder: the model and its ledger, whole, or neither
                    write_ledger(staging, *ledger)
            LOG.info("%s written to %s", "edited model and tokenizer" if save == "model" else save, out_dir)
        return result


def _save(result: UnlearnResult, out: Path, final: Path, save: str, model, tok, weights_copy, hparams, hparams_file,
          facts_file, retain_file, facts, name: str) -> None:
    """Write the ``--save`` output and the report into ``out`` (the staging folder of ``final``)."""
    from zerounlearn_editor.support.model_zoo import resolve_model_path

    start = time.perf_counter()
    if save == "model":
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
        result.saved = {"mode": "model", "dir": str(final)}
    elif save == "adapter":
        # the largest rank of the change of one weight: n (GD) or 2n (ZeroUnlearn, eps 0)
        bound = get_method(hparams.alg_name).adapter_rank_per_fact * len(facts)
        adapter: AdapterReport = export_lora_adapter(
            weights_copy, model, out, max_rank=bound, base_model_name_or_path=resolve_model_path(name),
            metadata=dict(method=hparams.alg_name, hparams_file=str(hparams_file), facts_file=str(facts_file),
                          n_facts=len(facts), rank_bound=bound),
        )
        result.saved = {"mode": "adapter", "dir": str(final), "r": adapter.r, "size_bytes": adapter.size_bytes,
                        "layers": [asdict(l) for l in adapter.layers]}
    else:
        result.saved = {"mode": "none"}
    result.seconds["save"] = time.perf_counter() - start
    (out / REPORT_NAME).write_text(
        json.dumps(dict(asdict(result), hparams_file=str(hparams_file), facts_file=str(facts_file),
                        retain_file=str(retain_file) if retain_file else None), indent=2), encoding="utf-8")


def _num(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _greedy_cell(text: str) -> str:
    """A continuation as a table cell; an empty one (e.g. EOS first: special tokens are dropped) says so."""
    if not text.strip():
        return "(empty)"
    return "`" + text.replace("\n", "\\n").replace("|", "\\|") + "`"


def format_unlearn(result: UnlearnResult) -> str:
    """A markdown report of :func:`run_unlearn`'s result."""
    lines = [f"## {result.method}", ""]
    answered = set(result.still_answered)
    scored = [i for i, r in enumerate(result.forgotten) if r.acc_after is not None]
    forgotten = [r for i, r in enumerate(result.forgotten) if i in scored and i not in answered]
    kept_answer = [r for i, r in enumerate(result.forgotten) if i in answered]
    unscored = [r for r in result.forgotten if r.acc_after is None]
    lines += [f"Forgotten: {len(forgotten)} of {len(scored)} facts with an answer; still answered after the edit: "
              f"{len(kept_answer)}" + (" (listed under \"Still answered\")" if kept_answer else ""), ""]
    sections = [("Forgotten facts", forgotten)] if forgotten else []
    if kept_answer:
        sections.append(
            (f"Still answered after the edit ({len(kept_answer)} of {len(scored)}): NOT forgotten", kept_answer)
        )
    if unscored:
        sections.append(("Edited facts without an answer (not scored)", unscored))
    sections += [("Retain facts", result.kept)] if result.kept else []
    for title, rows in sections:
        lines += [
            f"### {title}",
            "",
            "| prompt | answer | acc before | acc after | p before | p after | greedy before | greedy after |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r.prompt} | {r.answer or '-'} | {_num(r.acc_before, 2)} | {_num(r.acc_after, 2)} | "
                f"{_num(r.prob_before, 3)} | {_num(r.prob_after, 3)} | {_greedy_cell(r.greedy_before)} | "
                f"{_greedy_cell(r.greedy_after)} |"
            )
        lines.append("")
    if result.ppl_before is not None and result.ppl_after is not None:
        change = 100.0 * (result.ppl_after / result.ppl_before - 1.0)
        lines.append(
            f"Perplexity ({result.ppl_tokens} tokens): {result.ppl_before:.2f} -> {result.ppl_after:.2f} "
            f"({change:+.2f}%)"
        )
    saved = result.saved
    if saved.get("mode") == "adapter":
        ranks = ", ".join(f"{l['module']} r={l['rank']} residual {l['relative_residual']:.1e}" for l in saved["layers"])
        lines.append(f"LoRA adapter (r={saved['r']}, {saved['size_bytes'] / 1024:.1f} KiB) -> {saved['dir']}: {ranks}")
    elif saved.get("mode") == "model":
        lines.append(f"Edited model and tokenizer -> {saved['dir']}")
    if result.saved_ledger:
        lines.append(f"Ledger ({LEDGER_NAME}): {result.saved_ledger['facts']} fact(s) forgotten by "
                     f"{result.saved_ledger['edits']} edit(s)")
    if result.audit:
        lines += ["", format_facts_audit(result.audit), ""]
    lines.append("Stage times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    return "\n".join(lines)
