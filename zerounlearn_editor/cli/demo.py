"""``zerounlearn demo``: forget five capitals from SmolLM2-135M-Instruct and print a before/after table.

Per forgotten and untouched fact: teacher-forced token accuracy and probability of the true answer, and the
greedy continuation; then WikiText-2 perplexity. Default: ZeroUnlearn-GD with
``hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml`` and a retain set of other capitals
(:data:`RETAIN_FACTS`, none of them printed), so the untouched capitals stay known; ``paper=True``
(``--paper``): the paper's ZeroUnlearn YAML without a retain set, which also erases them. The YAML, the
statistics corpus and the perplexity text ship in the package (:mod:`zerounlearn_editor.data.builtin`).
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS, fact_requests
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.pipeline import EditReport
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.methods.registry import load_method
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
from zerounlearn_editor.support.progress import progress_bar
from zerounlearn_editor.support.resources import hparams_path

LOG = logging.getLogger(__name__)
Fact = Tuple[str, str, str]  # (prompt, subject, answer)

FORGET_FACTS = CAPITALS_TO_FORGET[:5]
KEEP_FACTS = OTHER_CAPITALS[:3] + UNRELATED_FACTS[:5]
RETAIN_FACTS = CAPITALS_TO_FORGET[5:]
"""The retain set of the default (retain-aware) demo: other capitals, none of them printed or scored."""


@dataclass
class DemoRow:
    prompt: str
    answer: str
    acc_before: float
    acc_after: float
    prob_before: float
    prob_after: float
    greedy_before: str
    greedy_after: str


@dataclass
class DemoResult:
    forgotten: List[DemoRow]
    kept: List[DemoRow]
    ppl_before: float
    ppl_after: float
    seconds: Dict[str, float]  # stage name -> seconds
    mode: str  # the method, e.g. "ZeroUnlearn (paper)"
    dtype: str  # the model's parameter dtype, e.g. "bfloat16"


def _scores(model: Any, tok: Any, facts: List[Fact]) -> Tuple[List[float], List[float], List[str]]:
    """Per fact: teacher-forced token accuracy and probability of the answer, and the 4-token greedy text."""
    scores = evaluate_probes(model, tok, [Probe(prompt, answer) for prompt, _, answer in facts])
    device = next(model.parameters()).device
    greedy = []
    with torch.no_grad():
        for prompt, _, _ in progress_bar(facts, desc="greedy continuations", unit="prompt"):
            ids = tok(prompt, return_tensors="pt").input_ids.to(device)
            gen = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
            greedy.append(tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=False).replace("\n", "\\n"))
    return scores["acc"], scores["prob"], greedy


def _demo_method(hparams_file: Optional[str], paper: bool) -> Tuple[Any, Callable[..., Any]]:
    """``(hparams, apply function)`` of a given YAML (either method), else of the retain-aware ZeroUnlearn-GD
    YAML, else (``paper``) of the paper's ZeroUnlearn YAML."""
    if hparams_file is None:
        method, name = ("ZeroUnlearn", "") if paper else ("ZeroUnlearn-GD", "-retain")
        hparams_file = hparams_path(method, "SmolLM2-135M-Instruct" + name)
    return load_method(hparams_file)


def demo_hparams(hparams_file: Optional[str] = None, paper: bool = False) -> Any:
    """The demo's hyperparameters (see :func:`_demo_method`)."""
    return _demo_method(hparams_file, paper)[0]


def run_demo(
    hparams_file: Optional[str] = None,
    corpus: Optional[str] = None,
    ppl_tokens: int = 20000,
    device: str = "cpu",
    paper: bool = False,
    dtype: Optional[str] = None,
    ppl_text: Optional[str] = None,
    stats_dir: Optional[str] = None,
) -> DemoResult:
    """Unlearn :data:`FORGET_FACTS` from SmolLM2 and measure before/after.

    A given ``hparams_file`` of either method is used as is, with :data:`RETAIN_FACTS` as retain set (prompts
    and subjects) unless ``paper`` or its retain weights are zero. ``dtype`` (default: the folder's) is the
    precision the model is loaded and edited in; ``ppl_text`` defaults to the embedded WikiText-2 test split;
    ``stats_dir`` overrides the YAML's statistics cache folder.
    """
    hparams, apply = _demo_method(hparams_file, paper)
    if stats_dir is not None:
        hparams = hparams.replace(stats_dir=str(stats_dir))
    corpus = corpus or hparams.mom2_dataset
    retain = None if paper else [{"prompt": p, "subject": s} for p, s, _ in RETAIN_FACTS]
    if retain is not None and not any(v > 0 for v in hparams.retain_weights().values()):
        retain = None  # a YAML with the paper's (zero) retain weights: nothing to protect with
    mode = f"{hparams.alg_name}" + (f" + retain set of {len(retain)} other capitals" if retain else " (paper)")
    LOG.info("demo: %s; model %s (%s) on %s", mode, hparams.model_name, dtype or "stored dtype", device)
    from zerounlearn_editor.data.corpus import check_corpus_source

    check_corpus_source(corpus)  # a missing corpus fails now, not after loading and evaluating
    model, tok = load_model_and_tokenizer(hparams.model_name, device=device, dtype=dtype)
    wikitext = ppl_text or default_ppl_text()
    seconds: Dict[str, float] = {}

    def evaluate(when: str) -> List[Any]:
        LOG.info("scoring %d facts to forget, %d to keep, and perplexity on %d tokens of %s (%s the edit)",
                 len(FORGET_FACTS), len(KEEP_FACTS), ppl_tokens, Path(wikitext).name, when)
        start = time.perf_counter()
        out = [_scores(model, tok, FORGET_FACTS), _scores(model, tok, KEEP_FACTS),
               perplexity(model, tok, wikitext, max_tokens=ppl_tokens)]
        seconds[f"evaluate_{when}"] = time.perf_counter() - start
        return out

    before = evaluate("before")
    requests = fact_requests(FORGET_FACTS)
    report = EditReport()
    LOG.info("unlearning %d facts with %s; C0 statistics from corpus %r, cached under %s",
             len(requests), mode, corpus, hparams.stats_dir)
    start = time.perf_counter()
    extra = {"retain": retain} if retain else {}
    model, _ = apply(model, tok, requests, hparams, corpus=corpus, report=report, **extra)
    seconds["unlearn"] = time.perf_counter() - start
    seconds.update({f"unlearn.{k}": v for k, v in report.timings.items()})
    after = evaluate("after")

    def rows(facts: List[Fact], b: Tuple[List[Any], ...], a: Tuple[List[Any], ...]) -> List[DemoRow]:
        return [DemoRow(f[0], f[2], *row) for f, row in zip(facts, zip(b[0], a[0], b[1], a[1], b[2], a[2]))]

    return DemoResult(
        forgotten=rows(FORGET_FACTS, before[0], after[0]),
        kept=rows(KEEP_FACTS, before[1], after[1]),
        ppl_before=before[2],
        ppl_after=after[2],
        seconds=seconds,
        mode=mode,
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
    )


def format_demo(result: DemoResult) -> str:
    """A markdown report of :func:`run_demo`'s result."""
    lines = [f"Method: {result.mode}", ""]
    for title, rows in (("Forgotten facts", result.forgotten), ("Untouched facts", result.kept)):
        lines += [f"### {title}", "", "| prompt | answer | acc before | acc after | p before | p after | "
                  "greedy before | greedy after |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(
                f"| {r.prompt} | {r.answer} | {r.acc_before:.2f} | {r.acc_after:.2f} | {r.prob_before:.3f} | "
                f"{r.prob_after:.3f} | `{r.greedy_before}` | `{r.greedy_after}` |"
            )
        lines.append("")
    change = 100.0 * (result.ppl_after / result.ppl_before - 1.0)
    lines.append(f"Model dtype: {result.dtype}")
    lines.append(f"WikiText-2 perplexity: {result.ppl_before:.2f} -> {result.ppl_after:.2f} ({change:+.2f}%)")
    lines.append("Stage times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    return "\n".join(lines)


def _cmd_demo(args: argparse.Namespace) -> int:
    result = run_demo(hparams_file=args.hparams, corpus=args.corpus, ppl_tokens=args.ppl_tokens, device=args.device,
                      paper=args.paper, dtype=args.dtype, ppl_text=args.ppl_text, stats_dir=args.stats_dir)
    print(format_demo(result))
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``demo`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "demo", help="forget a few facts from SmolLM2 and print a before/after table",
        parents=[parents.hparams("default: hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml with a retain set "
                                 "of other capitals (with --paper: hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml, no "
                                 "retain set)"),
                 parents.corpus(),
                 parents.ppl(20000, "perplexity tokens (default 20000; 0 = off)",
                             "perplexity text file (default: the embedded WikiText-2 test split)"),
                 parents.stats_dir(), parents.device(), parents.dtype(), parents.quiet()],
    )
    p.add_argument("--paper", action="store_true",
                   help="the paper's ZeroUnlearn without a retain set (it also erases the untouched capitals)")
    p.set_defaults(func=_cmd_demo)
