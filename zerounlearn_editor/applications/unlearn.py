"""``zerounlearn unlearn``: forget the facts of a file, show the effect, save the model or an adapter.

The facts file is a JSON / JSONL / YAML list of ``{"prompt", "subject", "answer"}`` mappings (``answer``
optional, only scored; ``target_new`` optional: a neutral target other than the YAML's); the method is
the hparams file's ``alg_name``. Results: a before/after table (teacher-forced answer accuracy and
probability, greedy continuation) of the edited facts, by outcome (forgotten, not known before, still
answered, taught, no answer: :mod:`~zerounlearn_editor.applications.fact_status`), and of the retain facts, the
perplexity change, and in ``--out`` the edited model (``--save model``) or a PEFT LoRA adapter of the
edit (``--save adapter``, :func:`~zerounlearn_editor.integrations.adapters.export_lora_adapter`), and
always :data:`REPORT_NAME`. Every input file (hparams, facts, retain set, perplexity text, ledger) is read and
checked once, before the model is loaded, and passed inward as the checked value; the edit's own checks run
once, before the facts are scored (its :class:`~zerounlearn_editor.engine.pipeline.EditPlan`), and ``--out`` is
written through a staging folder
(:mod:`zerounlearn_editor.support.output_dir`): it holds one run's files, whole, or is as it was.
With ``--save model`` or ``adapter`` the folder also holds a ledger of every fact the chain's edits targeted,
with its status (:mod:`zerounlearn_editor.applications.ledger`);
``--model`` a folder with a ledger continues from it, re-scores every fact it lists after the edit, and refuses
an edit that makes the model give one of them again (unless ``allow_came_back``). A repeated fact in the facts
file is edited once; ``--out`` holding a ledger the run does not continue is refused (unless ``replace_ledger``).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from zerounlearn_editor.applications.fact_status import (
    ANSWERED_RULE,
    ANSWERED_STATUSES,
    CONTINUATION_TOKENS,
    fact_key,
    fact_status,
    format_counts,
    is_answered,
    merged_facts,
    status_counts,
)
from zerounlearn_editor.applications.ledger import (
    LEDGER_NAME,
    REPORT_NAME,
    Continuation,
    LedgerError,
    build_ledger,
    check_out_ledger,
    edit_time,
    read_continuation,
    write_ledger,
)
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.fact_records import FactsFile, given_answer, read_facts_file
from zerounlearn_editor.data.record_files import RecordFileError, read_record_list
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.contexts import check_fewshot_facts
from zerounlearn_editor.engine.fluency_guard import GUARD_MODES
from zerounlearn_editor.engine.hparams import ConfigFile, HParamsError
from zerounlearn_editor.engine.pipeline import EditReport, check_edit_inputs
from zerounlearn_editor.engine.quantized_keys import forget_columns_per_request
from zerounlearn_editor.engine.requests import CheckedRequests, RequestError, check_requests, check_targets_not_answers
from zerounlearn_editor.engine.retain import check_retain_records
from zerounlearn_editor.evaluation.audit import AuditSettings, LensConfig, build_plan, score_model
from zerounlearn_editor.evaluation.audit.facts_audit import (
    facts_items,
    facts_pool,
    format_facts_audit,
    generic_passages,
)
from zerounlearn_editor.evaluation.audit.plan import check_audit_inputs, check_plan_lengths
from zerounlearn_editor.evaluation.generation import generate_greedy
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.perplexity import (
    check_ppl_text,
    leading_token_ids,
    opens_with_bos,
    perplexity_of_ids,
)
from zerounlearn_editor.integrations.adapters import AdapterReport, export_lora_adapter
from zerounlearn_editor.methods.registry import get_method, read_method
from zerounlearn_editor.support.model_access import max_positions
from zerounlearn_editor.support.output_dir import check_free_space, check_output_dir, staged_output_dir
from zerounlearn_editor.support.progress import progress_scope

LOG = logging.getLogger(__name__)

SAVE_MODES = ("model", "adapter", "none")
_BATCH_SIZE = 16


def load_facts(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """Edit requests from a facts file (:func:`~zerounlearn_editor.data.fact_records.read_facts_file`: errors name
    the file, record index and field; a repeated fact once)."""
    return read_facts_file(path).requests()


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
class EarlierRow:
    """A fact an earlier edit of the continued folder targeted, re-scored after this edit (greedy only when
    answered). ``status_before`` / ``status``: its ledger status before and after this edit
    (:data:`~zerounlearn_editor.applications.fact_status.STATUS_LABELS`)."""

    prompt: str
    answer: Optional[str]
    edit: int
    first_unanswered_edit: Optional[int]  # the first edit after which it was not answered
    status_before: str
    status: str
    acc_after: Optional[float]
    prob_after: Optional[float]
    greedy_after: str


@dataclass
class UnlearnResult:
    method: str
    forgotten: List[UnlearnRow]
    kept: List[UnlearnRow]
    ppl_before: Optional[float]
    ppl_after: Optional[float]
    ppl_tokens: int  # the tokens the perplexity measured (0: none)
    ppl_bos_windows: bool = False  # its windows opened with BOS (the tokenizer opens the text with it)
    seconds: Dict[str, float] = field(default_factory=dict)
    saved: Dict[str, Any] = field(default_factory=dict)
    audit: Optional[Dict[str, Any]] = None
    fluency: Dict[str, Any] = field(default_factory=dict)  # the edit's fluency guard (EditReport.fluency)
    saved_ledger: Optional[Dict[str, int]] = None  # the ledger written: its facts (any status), edits
    # indices into ``forgotten`` (one row per edited fact) whose answer is still given after the edit (acc after 1.0,
    # or the greedy continuation names it: fact_status.is_answered)
    still_answered: List[int] = field(default_factory=list)
    # per row of ``forgotten``: this edit's outcome, a key of STATUS_LABELS ("forgotten", "not_known",
    # "still_answered", "taught", "no_answer"; answered: fact_status.is_answered, what greedy decoding gives)
    statuses: List[str] = field(default_factory=list)
    # the facts earlier edits of the continued folder targeted (not this run's), re-scored after this edit
    earlier: List[EarlierRow] = field(default_factory=list)
    # earlier facts that came back with this edit (forgotten before it, answered after it): indices into ``earlier``
    came_back: List[int] = field(default_factory=list)
    # the ledger after this edit (every fact of the chain): {status: count}; {} without a ledger
    ledger_status: Dict[str, int] = field(default_factory=dict)


def _measure(model, tok, facts: Sequence[Dict[str, Any]], greedy_all: bool = True) -> Dict[str, List[Any]]:
    """Answer accuracy and probability (None without an answer), the greedy continuation of each fact
    (``greedy_all=False``: only of the facts with an answer, ``""`` for the others) and whether the model gives
    the fact (``answered``: :func:`~zerounlearn_editor.applications.fact_status.is_answered` of the two; None
    without an answer)."""
    with_answer = [i for i, f in enumerate(facts) if f.get("ground_truth")]
    probes = [Probe(facts[i]["prompt"], facts[i]["ground_truth"]) for i in with_answer]
    scores = evaluate_probes(model, tok, probes, _BATCH_SIZE) if probes else {"acc": [], "prob": []}
    acc: List[Optional[float]] = [None] * len(facts)
    prob: List[Optional[float]] = [None] * len(facts)
    for j, i in enumerate(with_answer):
        acc[i], prob[i] = scores["acc"][j], scores["prob"][j]
    shown = list(range(len(facts))) if greedy_all else with_answer
    greedy = [""] * len(facts)
    if shown:
        texts = generate_greedy(model, tok, [facts[i]["prompt"] for i in shown], CONTINUATION_TOKENS,
                                _BATCH_SIZE)
        for i, text in zip(shown, texts):
            greedy[i] = text
    answered = [is_answered(a, f.get("ground_truth"), g) for a, f, g in zip(acc, facts, greedy)]
    return {"acc": acc, "prob": prob, "greedy": greedy, "answered": answered}


def _rows(facts, before, after) -> List[UnlearnRow]:
    return [
        UnlearnRow(f["prompt"], f.get("ground_truth"), before["acc"][i], after["acc"][i], before["prob"][i],
                   after["prob"][i], before["greedy"][i], after["greedy"][i])
        for i, f in enumerate(facts)
    ]


@dataclass(frozen=True)
class UnlearnSettings:
    """How :func:`run_unlearn` runs: every setting but the model and the data (YAML, facts, retain set, ``--out``).

    ``save``: one of :data:`SAVE_MODES`. ``device`` / ``dtype``: where and how the model loads (``dtype`` None:
    the checkpoint's). ``corpus``: the statistics corpus (None: the YAML's ``mom2_dataset``). ``ppl_tokens``
    tokens of ``ppl_text`` (None: the WikiText-2 test split shipped with the package) give the perplexity
    before/after (0: off). ``progress=False`` hides every bar. ``audit`` (an
    :class:`~zerounlearn_editor.evaluation.audit.AuditSettings`) adds the robustness audit of the facts
    (:mod:`zerounlearn_editor.evaluation.audit.facts_audit`) to the report. ``fluency_guard`` (one of
    :data:`~zerounlearn_editor.engine.fluency_guard.GUARD_MODES`; ``"warn"`` for ``--allow-fluency-loss``;
    None: the YAML's) overrides the YAML's fluency guard. Checked when built: a bad value raises ``ValueError``
    (an ``AuditError`` for the audit's settings) naming the option.
    """

    save: str = "adapter"
    device: str = "cpu"
    dtype: Optional[str] = None
    corpus: Optional[str] = None
    ppl_tokens: int = 2000
    ppl_text: Optional[Union[str, Path]] = None
    progress: bool = True
    audit: Optional[AuditSettings] = None
    fluency_guard: Optional[str] = None

    def __post_init__(self) -> None:
        if self.save not in SAVE_MODES:
            raise ValueError(f"--save must be one of {SAVE_MODES}, got {self.save!r}")
        tokens = self.ppl_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0 or tokens == 1:
            raise ValueError(f"--ppl-tokens must be 0 (no perplexity) or an integer >= 2 (every token after the "
                             f"first is scored), got {tokens!r}")
        if self.fluency_guard is not None and self.fluency_guard not in GUARD_MODES:
            raise ValueError(f"fluency_guard must be one of {GUARD_MODES} or None (the YAML's), "
                             f"got {self.fluency_guard!r}")
        if self.audit is not None:
            self.audit.validate()


@dataclass(frozen=True)
class RetainSet:
    """A ``--retain`` file read and checked once (:func:`read_retain_set`): the edit's retain ``requests`` and the
    facts with an answer, ``(prompt, subject, answer)`` (scored before and after the edit, lent to the audit)."""

    requests: CheckedRequests
    answered: Tuple[Tuple[str, str, str], ...]


def read_retain_set(path: Union[str, Path]) -> RetainSet:
    """Read and check a retain file once (errors name the file, record and field)."""
    records = read_record_list(path, what="retain facts")
    requests = check_retain_records(records, path)
    answered = tuple((r["prompt"], r["subject"], answer) for r in records
                     if (answer := given_answer(r)) is not None)
    return RetainSet(requests, answered)


@dataclass
class _Job:
    """What the checks before the model loads give (:func:`_check_before_loading`): every input read and checked
    once, passed inward as read (``source``: the hparams file, ``facts_file``: the facts, ``forget``: their checked
    requests, ``retain``: the ``--retain`` set, ``ppl_text``: the perplexity text)."""

    hparams: Any
    apply: Callable[..., Any]
    continuation: Optional[Continuation]
    facts_file: FactsFile
    forget: CheckedRequests
    source: Optional[ConfigFile] = None  # the hparams file as read
    retain: Optional[RetainSet] = None
    ppl_text: Optional[Tuple[str, str]] = None  # (its name in messages, the text); None: no perplexity
    earlier: List[Dict[str, Any]] = field(default_factory=list)  # the continued ledger's records not edited again
    audit_items: List[Any] = field(default_factory=list)
    audit_pool: Any = None
    passages: List[str] = field(default_factory=list)

    @property
    def facts(self) -> List[Dict[str, Any]]:
        """The facts' request dicts (``ground_truth``: the answer)."""
        return self.facts_file.requests()

    @property
    def retain_facts(self) -> List[Dict[str, Any]]:
        """The retain facts with an answer (scored), ``{"prompt", "ground_truth"}``."""
        answered = self.retain.answered if self.retain is not None else ()
        return [{"prompt": prompt, "ground_truth": answer} for prompt, _, answer in answered]


@dataclass
class _Loaded:
    """The model, its tokenizer and what was checked against it (:func:`_load_and_plan`)."""

    model: Any
    tok: Any
    plan: Any
    second_moments: Any = None
    audit_plan: Any = None
    lens: Optional[LensConfig] = None


def _checked_facts(facts: FactsFile, hparams: Any) -> CheckedRequests:
    """The facts' requests checked once, and against the YAML before the model loads: a deep YAML's few-shot facts,
    and no neutral target that is the answer (it would teach the fact)."""
    try:
        forget = check_requests(facts.requests(), distinct_answers=hparams.target_objective == "suppress_answer")
    except RequestError as exc:
        raise RecordFileError(f"{facts.path}: {str(exc).replace('request ', 'record ', 1)}") from None
    fewshot = hparams.fewshot_contexts
    if fewshot:  # a deep YAML's few-shot facts are planned from the facts alone
        check_fewshot_facts(list(forget.requests), fewshot)
    try:
        check_targets_not_answers(forget.requests, hparams.neutral_target)
    except RequestError as exc:
        raise RecordFileError(f"{facts.path}: {str(exc).replace('request ', 'record ', 1)}") from None
    return forget


def _read_retain(retain_file: Optional[Union[str, Path]], hparams: Any,
                 hparams_file: Union[str, Path]) -> Optional[RetainSet]:
    """The retain file read and checked once (the YAML must weigh a retain set), None without one."""
    if not retain_file:
        return None
    retain = read_retain_set(retain_file)  # errors name the file, record and field
    if not any(v > 0 for v in hparams.retain_weights().values()):
        raise HParamsError(
            f"--retain given, but the retain weights {sorted(hparams.retain_weights())} of "
            f"{hparams_file} are all 0 (the paper's method ignores a retain set); use a retain-aware "
            "YAML, e.g. hparams/ZeroUnlearn-GD/<model>-retain.yaml"
        )
    return retain


def _earlier_facts(facts: List[Dict[str, Any]], facts_file: Union[str, Path],
                   continuation: Optional[Continuation]) -> List[Dict[str, Any]]:
    """The continued ledger's records of facts this run does not edit again. A fact it lists (same prompt and
    subject) is edited again with a warning (its record is updated, not repeated); with another answer it is an
    error."""
    if continuation is None:
        return []
    listed = {fact_key(r): r for r in continuation.ledger["facts"]}
    again = []
    for index, fact in enumerate(facts):
        record = listed.get(fact_key(fact))
        if record is None:
            continue
        if record.get("answer") != fact.get("ground_truth"):
            raise RecordFileError(
                f"{facts_file}: fact {index} ({fact['prompt']!r}): the ledger of {continuation.folder} lists this "
                f"prompt and subject with answer {record.get('answer')!r}, not {fact.get('ground_truth')!r}; one "
                "answer a fact: give the ledger's")
        again.append(f"{fact['prompt']!r} (edit {record['edit']}, {record.get('status')})")
    if again:
        LOG.warning("%s: %d fact(s) the ledger of %s already lists are edited again (the ledger keeps one record "
                    "each, with every edit that targeted it): %s", facts_file, len(again), continuation.folder,
                    "; ".join(again))
    targeted = {fact_key(f) for f in facts}
    return [r for r in continuation.ledger["facts"] if fact_key(r) not in targeted]


def _check_before_loading(hparams_file: Union[str, Path], facts_file: Union[str, Path],
                          out_dir: Optional[Union[str, Path]], retain_file: Optional[Union[str, Path]],
                          model_name: Optional[str], settings: UnlearnSettings, replace_ledger: bool = False) -> _Job:
    """Every input check that needs no model: ``--out``, the YAML and its method, a ledger to continue (and one in
    ``--out`` this run would replace), the facts, the retain set, the audit's items and pool."""
    if settings.save != "none" and out_dir is None:
        raise ValueError(f"--save {settings.save} needs --out")
    if out_dir is not None:
        check_output_dir(out_dir, (REPORT_NAME,))
    ppl_text = _read_ppl_text(settings)
    method = read_method(hparams_file)
    hparams = method.hparams
    continuation = read_continuation(model_name or hparams.model_name, hparams)  # a ledger: checked before loading
    if out_dir is not None:
        check_out_ledger(Path(out_dir), continuation, replace_ledger)
    facts = read_facts_file(facts_file)
    forget = _checked_facts(facts, hparams)
    retain = _read_retain(retain_file, hparams, hparams_file)
    job = _Job(hparams, method.apply, continuation, facts, forget, method.source, retain, ppl_text)
    job.earlier = _earlier_facts(job.facts, facts_file, continuation)
    audit = settings.audit
    if audit is not None:
        job.audit_items = facts_items(facts.records)
        if not job.audit_items:
            raise RecordFileError(f"{facts_file}: --audit needs facts with an 'answer'; none has one")
        if "relearning" in audit.families:
            job.passages = generic_passages(settings.corpus or hparams.mom2_dataset)
        job.audit_pool = facts_pool(retain.answered if retain is not None else ())
        check_audit_inputs(job.audit_items, job.audit_pool, audit, job.passages)  # before any work
    return job


def _read_ppl_text(settings: UnlearnSettings) -> Optional[Tuple[str, str]]:
    """The perplexity text, read once: ``(its name in messages, the text)``; ``--ppl-text`` checked before the
    model loads, else the WikiText-2 test split shipped with the package (None: off, or the shipped text is
    missing, with a warning)."""
    if settings.ppl_tokens <= 0:
        return None
    if settings.ppl_text:
        return str(settings.ppl_text), check_ppl_text(settings.ppl_text)
    try:
        path = Path(default_ppl_text())
        return str(path), path.read_text(encoding="utf-8")
    except OSError as exc:
        LOG.warning("no perplexity text: %s; perplexity skipped (give --ppl-text)", exc)
        return None


def _load_and_plan(job: _Job, name: str, settings: UnlearnSettings, out_dir: Optional[Union[str, Path]],
                   seconds: Dict[str, float]) -> _Loaded:
    """Load the model (its time in ``seconds["load"]``), check a continued folder's model, and run the edit's
    checks (hparams, requests, retain set, modules, lengths, capacity) and the audit's plan before any scoring."""
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer  # late: tests patch it

    start = time.perf_counter()
    model, tok = load_model_and_tokenizer(name, device=settings.device, dtype=settings.dtype)
    seconds["load"] = time.perf_counter() - start
    hparams, second_moments = job.hparams, None
    if job.continuation is not None:  # the folder's weights, the base model's C0, the earlier edits' prefixes
        second_moments = job.continuation.check_model(model, hparams, settings.corpus)
        job.continuation.restore_prefixes(model)
    plan = check_edit_inputs(model, tok, job.forget, hparams, job.retain.requests if job.retain else None)
    check_requests = get_method(hparams.alg_name).check_requests
    if check_requests is not None:  # e.g. ZeroUnlearn's capacity limit
        check_requests(model, hparams, len(plan.forget))
    loaded = _Loaded(model, tok, plan, second_moments)
    audit = settings.audit
    if audit is not None:  # the probes of the facts the edit keeps (a repeated fact once), drawn before the edit
        edited = {str(r.index) for r in plan.forget}
        items = [i for i in job.audit_items if i.case_id in edited]
        loaded.audit_plan = build_plan(items, job.audit_pool, tok, audit, job.passages)
        check_plan_lengths(loaded.audit_plan, tok, max_positions(model))
        loaded.lens = LensConfig(hparams.layers[0], hparams.layer_module_tmp, hparams.ln_f_module)
    if out_dir is not None and settings.save == "model":
        check_free_space(out_dir, sum(p.numel() * p.element_size() for p in model.parameters()))
    return loaded


def _ppl_ids(tok, job: _Job, settings: UnlearnSettings) -> List[int]:
    """The tokens of the perplexity text the perplexity measures (at most ``ppl_tokens``; none without a text);
    fewer than 2 raise ``ValueError`` naming the file, before any scoring."""
    if job.ppl_text is None:
        return []
    name, text = job.ppl_text
    ids = leading_token_ids(tok, text, settings.ppl_tokens)
    if len(ids) < 2:
        raise ValueError(f"--ppl-text {name}: {len(ids)} token(s) of text; perplexity needs at least 2 (give a longer "
                         "text, or --ppl-tokens 0)")
    return ids


def _score(model, tok, job: _Job, ppl_ids: List[int]) -> Dict[str, Any]:
    """The facts', the retain facts' and the perplexity's scores of ``model`` (before or after the edit), the
    perplexity on the tokens ``ppl_ids`` (:func:`_ppl_ids`)."""
    return {"forget": _measure(model, tok, job.facts),
            "kept": _measure(model, tok, job.retain_facts) if job.retain_facts else None,
            "ppl": perplexity_of_ids(model, tok, ppl_ids) if ppl_ids else None,
            "ppl_tokens": len(ppl_ids), "ppl_bos_windows": opens_with_bos(tok, ppl_ids)}


def _edit(job: _Job, loaded: _Loaded, settings: UnlearnSettings, report: EditReport) -> Tuple[Any, Dict[str, Any]]:
    """The method's edit of the checked plan (not checked again): ``(model, weights_copy)``."""
    hparams = job.hparams
    LOG.info("unlearning %d facts with %s (layers %s)", len(job.facts), hparams.alg_name, hparams.layers)
    model, weights_copy = job.apply(
        loaded.model, loaded.tok, loaded.plan, hparams, return_orig_weights=True, report=report,
        progress=settings.progress, corpus=settings.corpus,
        fluency_guard=settings.fluency_guard, second_moments=loaded.second_moments)
    if report.fluency:
        guard = report.fluency
        LOG.info("fluency guard: perplexity %.3f -> %.3f (%+.1f%%) on %d tokens of the built-in text",
                 guard["ppl_before"], guard["ppl_after"], 100 * guard["increase"], guard["tokens"])
    return model, weights_copy


def _result(job: _Job, before: Dict[str, Any], after: Dict[str, Any], settings: UnlearnSettings,
            seconds: Dict[str, float], report: EditReport, audit_report: Optional[Dict[str, Any]]) -> UnlearnResult:
    """The run's :class:`UnlearnResult` (nothing saved yet)."""
    return UnlearnResult(
        method=job.hparams.alg_name,
        forgotten=_rows(job.facts, before["forget"], after["forget"]),
        kept=_rows(job.retain_facts, before["kept"], after["kept"]) if job.retain_facts else [],
        ppl_before=before["ppl"],
        ppl_after=after["ppl"],
        ppl_tokens=before["ppl_tokens"],  # the tokens measured (the text may hold fewer than --ppl-tokens)
        ppl_bos_windows=before["ppl_bos_windows"],
        seconds=seconds,
        audit=audit_report,
        fluency=dict(report.fluency),
        still_answered=[i for i, answered in enumerate(after["forget"]["answered"]) if answered],
    )


def _fact_statuses(job: _Job, result: UnlearnResult, before: Dict[str, Any], after: Dict[str, Any],
                   time: str) -> List[Dict[str, Any]]:
    """Set ``result``'s statuses, earlier rows, ``came_back`` and ``ledger_status``; return the ledger's fact
    records after this edit (:func:`~zerounlearn_editor.applications.fact_status.merged_facts`).
    ``after["earlier"]``: the scores of ``job.earlier`` after the edit."""
    answered_before, answered_after = before["forget"]["answered"], after["forget"]["answered"]
    result.statuses = [fact_status(b, a, None) for b, a in zip(answered_before, answered_after)]
    previous = job.continuation.ledger if job.continuation is not None else {"facts": [], "edits": []}
    scores = after["earlier"]
    now = {fact_key(r): answered for r, answered in zip(job.earlier, scores["answered"])}
    records = merged_facts(previous["facts"], [now.get(fact_key(r)) for r in previous["facts"]], job.facts,
                           answered_before, answered_after, len(previous["edits"]), time)
    by_key = {fact_key(r): r for r in records}
    older_rule = "answered_rule" not in previous and bool(previous["edits"])  # the answer's tokens only
    named_only = []
    for j, old in enumerate(job.earlier):
        new = by_key[fact_key(old)]
        result.earlier.append(EarlierRow(old["prompt"], old.get("answer"), old["edit"], new["first_unanswered_edit"],
                                         old.get("status", "-"), new["status"], scores["acc"][j], scores["prob"][j],
                                         scores["greedy"][j]))
        if new["answered"] and old.get("answered") is False:
            # under the older rule a fact whose answer is only named (not its tokens greedy) was "not answered":
            # that change of rule is not this edit's doing, so it is not refused as this edit's
            (named_only if older_rule and scores["acc"][j] != 1.0 else result.came_back).append(j)
    if named_only:
        LOG.warning("%d earlier fact(s) the ledger recorded as not answered name their answer in the greedy "
                    "continuation, which its earlier runs did not count (%s); the ledger marks them came_back, "
                    "not forgotten: %s", len(named_only), ANSWERED_RULE,
                    "; ".join(f"{job.earlier[j]['prompt']!r} -> {scores['greedy'][j]!r}" for j in named_only[:5]))
    result.ledger_status = status_counts(r["status"] for r in records)
    return records


def _refuse_came_back(result: UnlearnResult, folder: Path) -> None:
    """Raise :class:`~zerounlearn_editor.applications.ledger.LedgerError` naming the earlier facts this edit made
    the model give again (``result.came_back``)."""
    rows = [result.earlier[i] for i in result.came_back]
    shown = "; ".join(f"{r.prompt!r} -> {(r.greedy_after.strip().splitlines() or [''])[0]!r} (edit {r.edit}, "
                      f"was {r.status_before})"
                      for r in rows[:5]) + (f" (+{len(rows) - 5} more)" if len(rows) > 5 else "")
    raise LedgerError(
        f"this edit made the model give {len(rows)} fact(s) the ledger of {folder} lists as not answered again: "
        f"{shown}; nothing was written. Forget them again in this run (add them to the facts file), use a YAML "
        "that keeps earlier facts (e.g. <model>-many.yaml, README \"Forgetting over time\"), or pass "
        "--allow-came-back (API: allow_came_back=True) to keep the edit, the ledger marking them \"came back\"")


def run_unlearn(
    hparams_file: Union[str, Path],
    facts_file: Union[str, Path],
    out_dir: Optional[Union[str, Path]],
    retain_file: Optional[Union[str, Path]] = None,
    model_name: Optional[str] = None,
    settings: Optional[UnlearnSettings] = None,
    replace_ledger: bool = False,
    allow_came_back: bool = False,
) -> UnlearnResult:
    """Unlearn the facts of ``facts_file`` and save the result (see module docstring).

    ``model_name``: the model (None: the YAML's ``model_name``; a folder with a ledger continues from it: every
    fact its ledger lists is re-scored after the edit). ``settings``: everything else (:class:`UnlearnSettings`;
    None: its defaults). ``replace_ledger``: replace a ledger in ``out_dir`` this run does not continue (else
    refused). ``allow_came_back``: keep an edit that makes the model give a fact the ledger lists as not answered
    (else refused, nothing written; the ledger marks such facts ``came_back`` either way).
    """
    settings = UnlearnSettings() if settings is None else settings
    with progress_scope(settings.progress):
        job = _check_before_loading(hparams_file, facts_file, out_dir, retain_file, model_name, settings,
                                    replace_ledger)
        hparams, audit = job.hparams, settings.audit
        seconds: Dict[str, float] = {}
        name = model_name or hparams.model_name
        loaded = _load_and_plan(job, name, settings, out_dir, seconds)
        ppl_ids = _ppl_ids(loaded.tok, job, settings)

        start = time.perf_counter()
        LOG.info("scoring %d facts (and %d retain facts) before the edit", len(job.facts), len(job.retain_facts))
        before = _score(loaded.model, loaded.tok, job, ppl_ids)
        seconds["evaluate_before"] = time.perf_counter() - start
        if audit is not None:  # the probes are drawn once, before the edit
            start = time.perf_counter()
            audit_before = score_model(loaded.model, loaded.tok, loaded.audit_plan, audit, loaded.lens)
            seconds["audit_before"] = time.perf_counter() - start

        report = EditReport()
        start = time.perf_counter()
        model, weights_copy = _edit(job, loaded, settings, report)
        seconds["unlearn"] = time.perf_counter() - start
        seconds.update({f"unlearn.{k}": v for k, v in report.timings.items()})

        start = time.perf_counter()
        after = _score(model, loaded.tok, job, ppl_ids)
        after["earlier"] = _measure(model, loaded.tok, [{"prompt": r["prompt"], "ground_truth": r.get("answer")}
                                                        for r in job.earlier], greedy_all=False)
        seconds["evaluate_after"] = time.perf_counter() - start
        audit_report = None
        if audit is not None:
            start = time.perf_counter()
            audit_report = {"settings": audit.to_dict(), "plan": loaded.audit_plan.describe(), "before": audit_before,
                            "after": score_model(model, loaded.tok, loaded.audit_plan, audit, loaded.lens)}
            seconds["audit_after"] = time.perf_counter() - start

        result = _result(job, before, after, settings, seconds, report, audit_report)
        stamp = edit_time()
        records = _fact_statuses(job, result, before, after, stamp)
        if result.came_back and not allow_came_back:
            _refuse_came_back(result, job.continuation.folder)
        if out_dir is not None:
            _write_out(result, Path(out_dir), settings.save, model, loaded.tok, weights_copy, job, report,
                       (job.source, facts_file, retain_file, name), settings.corpus, (records, stamp))
        return result


def _write_out(result: UnlearnResult, out_dir: Path, save: str, model, tok, weights_copy, job: _Job,
               report: EditReport, sources: Tuple[Any, Any, Any, str], corpus: Optional[str],
               records: Tuple[List[Dict[str, Any]], str]) -> None:
    """Write ``out_dir`` through a staging folder: the ``--save`` output, the report and (saving a model or an
    adapter) the ledger, whole, or nothing. ``sources``: ``(the hparams file as read (a ConfigFile), facts_file,
    retain_file, model name)``;
    ``records``: the ledger's fact records after this edit and its time (:func:`_fact_statuses`)."""
    hparams_file, facts_file, retain_file, name = sources
    ledger = None
    if save != "none":
        ledger = (build_ledger(job.continuation, model, weights_copy, job.hparams, hparams_file, facts_file,
                               records[0], name, corpus, save, records[1]))
        result.saved_ledger = {"facts": len(ledger["facts"]), "edits": len(ledger["edits"])}
    with staged_output_dir(out_dir) as staging:
        _save(result, staging, out_dir, save, model, tok, weights_copy, job.hparams, hparams_file.name,
              facts_file, retain_file, job.facts, name)
        if ledger is not None:  # inside the staging folder: the model and its ledger, whole, or neither
            write_ledger(staging, ledger)
    LOG.info("%s written to %s", "edited model and tokenizer" if save == "model" else save, out_dir)


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
        # the largest rank of the change of one weight: n (GD) or 2n (ZeroUnlearn, eps 0) per forget column, and
        # quantized_forget_keys gives the solve two columns a fact
        bound = (get_method(hparams.alg_name).adapter_rank_per_fact * forget_columns_per_request(hparams)
                 * len(facts))
        adapter: AdapterReport = export_lora_adapter(
            weights_copy, model, out, max_rank=bound,
            base_model_name_or_path=_adapter_base(resolve_model_path(name)),
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


def _adapter_base(resolved: str) -> str:
    """The adapter's ``base_model_name_or_path``: a local folder as an absolute path (it loads from any working
    directory), a hub name as it is."""
    path = Path(resolved).expanduser()
    return str(path.resolve()) if path.exists() else resolved


def _num(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _greedy_cell(text: str) -> str:
    """A continuation as a table cell; an empty one (e.g. EOS first: special tokens are dropped) says so."""
    if not text.strip():
        return "(empty)"
    return "`" + text.replace("\n", "\\n").replace("|", "\\|") + "`"


_EDIT_SECTIONS = (
    ("forgotten", "Forgotten facts (answered before the edit, not after)"),
    ("not_known", "Not known before the edit (nothing to forget)"),
    ("still_answered", "Still answered after the edit"),
    ("taught", "Taught by the edit (not answered before it, answered after): NOT forgotten"),
    ("no_answer", "Edited facts without an answer (not scored)"),
)
_HEADLINE = (("not_known", "not known before the edit (nothing to forget)"),
             ("still_answered", "still answered after the edit (NOT forgotten)"),
             ("taught", "taught by the edit (NOT forgotten)"), ("no_answer", "no answer given (not scored)"))


def _headline(result: UnlearnResult) -> List[str]:
    """This edit's counts by outcome, and the earlier facts' after it (a continued run)."""
    counts = status_counts(result.statuses)
    known = counts["forgotten"] + counts["still_answered"]
    line = f"Forgotten: {counts['forgotten']} of {known} fact(s) the model answered before the edit"
    line += "".join(f"; {label}: {counts[key]}" for key, label in _HEADLINE if counts[key])
    lines = [line]
    if result.earlier:
        lines.append(f"Earlier facts ({len(result.earlier)}, from the ledger), re-scored after this edit: "
                     f"{format_counts(status_counts(r.status for r in result.earlier))}")
    if result.came_back:
        lines.append(f"CAME BACK: this edit made the model give {len(result.came_back)} earlier fact(s) again "
                     "(listed under \"Came back\"; the ledger marks them)")
    return lines + [""]


def _table(title: str, rows: Sequence[UnlearnRow]) -> List[str]:
    lines = [f"### {title}", "",
             "| prompt | answer | acc before | acc after | p before | p after | greedy before | greedy after |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.prompt} | {r.answer or '-'} | {_num(r.acc_before, 2)} | {_num(r.acc_after, 2)} | "
            f"{_num(r.prob_before, 3)} | {_num(r.prob_after, 3)} | {_greedy_cell(r.greedy_before)} | "
            f"{_greedy_cell(r.greedy_after)} |"
        )
    return lines + [""]


def _earlier_table(title: str, rows: Sequence[EarlierRow]) -> List[str]:
    lines = [f"### {title}", "", "| prompt | answer | edit | status before this edit | status after | acc after | "
             "p after | greedy after |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.prompt} | {r.answer or '-'} | {r.edit} | {r.status_before} | {r.status} | "
                     f"{_num(r.acc_after, 2)} | {_num(r.prob_after, 3)} | "
                     f"{_greedy_cell(r.greedy_after) if r.greedy_after else '-'} |")
    return lines + [""]


def _sections(result: UnlearnResult) -> List[str]:
    """The tables: this edit's facts by outcome, the earlier facts answered after it, the retain facts."""
    lines: List[str] = []
    scored = sum(s != "no_answer" for s in result.statuses)
    for key, title in _EDIT_SECTIONS:
        rows = [r for r, s in zip(result.forgotten, result.statuses) if s == key]
        if key == "still_answered" and rows:
            title = f"{title} ({len(rows)} of {scored}): NOT forgotten"
        if rows:
            lines += _table(title, rows)
    came_back = [result.earlier[i] for i in result.came_back]
    if came_back:
        lines += _earlier_table("Came back: earlier facts the model gives again after this edit (NOT forgotten)",
                                came_back)
    answered = [r for i, r in enumerate(result.earlier) if r.status in ANSWERED_STATUSES and i not in result.came_back]
    if answered:
        lines += _earlier_table("Earlier facts still given after this edit (NOT forgotten)", answered)
    return lines + (_table("Retain facts", result.kept) if result.kept else [])


def format_unlearn(result: UnlearnResult) -> str:
    """A markdown report of :func:`run_unlearn`'s result."""
    lines = [f"## {result.method}", "", *_headline(result), *_sections(result)]
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
        lines.append(f"Ledger ({LEDGER_NAME}): {result.saved_ledger['facts']} fact(s) of "
                     f"{result.saved_ledger['edits']} edit(s), as of this edit: {format_counts(result.ledger_status)}")
    if result.audit:
        lines += ["", format_facts_audit(result.audit), ""]
    lines.append("Stage times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    return "\n".join(lines)
