"""``zerounlearn demo``: forget a handful of facts from SmolLM2-135M-Instruct and show the effect.

Prints a before/after table of the forgotten facts (teacher-forced token accuracy and
probability of the true answer, and the greedy continuation), of untouched facts, and
WikiText-2 perplexity.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

from .data.types import Probe
from .evaluation.metrics import evaluate_probes
from .facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS, fact_requests
from .evaluation.perplexity import perplexity
from .hparams import ZeroUnlearnHyperParams
from .model_zoo import load_model_and_tokenizer
from .pipeline import EditReport
from .resources import hparams_path, shared_file
from .zerounlearn_main import apply_zerounlearn_to_model

__all__ = ["FORGET_FACTS", "KEEP_FACTS", "DemoRow", "run_demo", "format_demo"]

LOG = logging.getLogger(__name__)

FORGET_FACTS = CAPITALS_TO_FORGET[:5]
KEEP_FACTS = OTHER_CAPITALS[:3] + UNRELATED_FACTS[:5]


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
    seconds: Dict[str, float] = field(default_factory=dict)


def _greedy(model, tok, prompts: List[str], new_tokens: int = 4) -> List[str]:
    outs = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for prompt in prompts:
            ids = tok(prompt, return_tensors="pt").input_ids.to(device)
            gen = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
            outs.append(tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=False).replace("\n", "\\n"))
    return outs


def _scores(model, tok, facts):
    probes = [Probe(prompt, answer) for prompt, _, answer in facts]
    scores = evaluate_probes(model, tok, probes)
    return scores["acc"], scores["prob"], _greedy(model, tok, [p for p, _, _ in facts])


def run_demo(
    hparams_file: Optional[str] = None,
    corpus: Optional[str] = None,
    ppl_tokens: int = 20000,
    device: str = "cpu",
) -> DemoResult:
    """Unlearn :data:`FORGET_FACTS` from SmolLM2 with ZeroUnlearn and measure before/after."""
    hparams = ZeroUnlearnHyperParams.from_hparams(hparams_file or hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct"))
    corpus = corpus or hparams.mom2_dataset
    from .corpus import check_corpus_source

    check_corpus_source(corpus)  # a missing corpus fails now, not after loading and evaluating
    shared_file("text/wikitext2_raw_test.txt")
    model, tok = load_model_and_tokenizer(hparams.model_name, device=device)
    wikitext = shared_file("text/wikitext2_raw_test.txt")
    seconds: Dict[str, float] = {}

    start = time.perf_counter()
    f_acc0, f_prob0, f_gen0 = _scores(model, tok, FORGET_FACTS)
    k_acc0, k_prob0, k_gen0 = _scores(model, tok, KEEP_FACTS)
    ppl0 = perplexity(model, tok, wikitext, max_tokens=ppl_tokens)
    seconds["evaluate_before"] = time.perf_counter() - start

    requests = fact_requests(FORGET_FACTS)
    report = EditReport()
    start = time.perf_counter()
    model, _ = apply_zerounlearn_to_model(model, tok, requests, hparams, corpus=corpus, report=report)
    seconds["unlearn"] = time.perf_counter() - start
    seconds.update({f"unlearn.{k}": v for k, v in report.timings.items()})

    start = time.perf_counter()
    f_acc1, f_prob1, f_gen1 = _scores(model, tok, FORGET_FACTS)
    k_acc1, k_prob1, k_gen1 = _scores(model, tok, KEEP_FACTS)
    ppl1 = perplexity(model, tok, wikitext, max_tokens=ppl_tokens)
    seconds["evaluate_after"] = time.perf_counter() - start

    def rows(facts, acc0, acc1, prob0, prob1, gen0, gen1):
        return [
            DemoRow(f[0], f[2], acc0[i], acc1[i], prob0[i], prob1[i], gen0[i], gen1[i]) for i, f in enumerate(facts)
        ]

    return DemoResult(
        forgotten=rows(FORGET_FACTS, f_acc0, f_acc1, f_prob0, f_prob1, f_gen0, f_gen1),
        kept=rows(KEEP_FACTS, k_acc0, k_acc1, k_prob0, k_prob1, k_gen0, k_gen1),
        ppl_before=ppl0,
        ppl_after=ppl1,
        seconds=seconds,
    )


def format_demo(result: DemoResult) -> str:
    """A markdown report of :func:`run_demo`'s result."""
    lines = []
    for title, rows in (("Forgotten facts", result.forgotten), ("Untouched facts", result.kept)):
        lines += [
            f"### {title}",
            "",
            "| prompt | answer | acc before | acc after | p before | p after | greedy before | greedy after |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r.prompt} | {r.answer} | {r.acc_before:.2f} | {r.acc_after:.2f} | {r.prob_before:.3f} | "
                f"{r.prob_after:.3f} | `{r.greedy_before}` | `{r.greedy_after}` |"
            )
        lines.append("")
    change = 100.0 * (result.ppl_after / result.ppl_before - 1.0)
    lines.append(f"WikiText-2 perplexity: {result.ppl_before:.2f} -> {result.ppl_after:.2f} ({change:+.2f}%)")
    lines.append("Stage times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    return "\n".join(lines)
