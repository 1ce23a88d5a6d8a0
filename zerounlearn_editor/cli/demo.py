"""``zerounlearn demo``: forget five facts a small model knows and print a before/after table.

Per forgotten and untouched fact: teacher-forced token accuracy and probability of the true answer, and the
greedy continuation; then WikiText-2 perplexity. Default: ZeroUnlearn-GD with
``hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml`` and a retain set of other capitals
(:data:`RETAIN_FACTS`, none of them printed), so the untouched capitals stay known; ``paper=True``
(``--paper``): the paper's ZeroUnlearn YAML without a retain set, which also erases them. The YAML, the
statistics corpus and the perplexity text ship in the package (:mod:`zerounlearn_editor.data.builtin`).

``--model`` (:data:`DEMO_MODELS`) picks a model ``zerounlearn prepare-model`` knows, with the facts that model
answers greedily: ``smollm2`` (default, five capitals) or ``gemma3-270m`` (the base Gemma-3-270m answers one of
the 15 built-in capitals, so five authors and inventors). No YAML ships for Gemma: without ``--hparams`` the demo
uses the one ``init-hparams``' rules give it (:func:`~zerounlearn_editor.cli.rules_yaml.rules_yaml`: layers by
the causal trace of the five facts, settings measured on the weights; written once, then cached by what it depends
on). The report names the YAML used.
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
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer, zoo_model
from zerounlearn_editor.support.progress import progress_bar
from zerounlearn_editor.support.resources import hparams_path

LOG = logging.getLogger(__name__)
Fact = Tuple[str, str, str]  # (prompt, subject, answer)

FORGET_FACTS = CAPITALS_TO_FORGET[:5]
KEEP_FACTS = OTHER_CAPITALS[:3] + UNRELATED_FACTS[:5]
RETAIN_FACTS = CAPITALS_TO_FORGET[5:]
"""The retain set of the default (retain-aware) demo: other capitals, none of them printed or scored."""


def _pick(*subjects: str) -> List[Fact]:
    """The built-in :data:`UNRELATED_FACTS` of these subjects, in this order."""
    by_subject = {s: (p, s, a) for p, s, a in UNRELATED_FACTS}
    return [by_subject[s] for s in subjects]


@dataclass(frozen=True)
class DemoModel:
    """One model of the demo: its ``prepare-model`` name, the facts it forgets, keeps (both printed) and protects
    (the retain set, not printed) and the default YAMLs (``hparams/<method>/<stem>.yaml``), or (``by_rule``) none
    shipped: the YAML ``init-hparams``' rules write for the loaded model (:mod:`.rules_yaml`) instead of ``yaml``,
    and ``--paper`` needs ``--hparams``."""

    name: str
    forget: List[Fact]
    keep: List[Fact]
    retain: List[Fact]
    yaml: Tuple[str, str] = ("ZeroUnlearn-GD", "SmolLM2-135M-Instruct-retain")
    paper_yaml: Tuple[str, str] = ("ZeroUnlearn", "SmolLM2-135M-Instruct")
    by_rule: bool = False
    retain_label: str = "other capitals"


DEMO_MODELS: Dict[str, DemoModel] = {
    "smollm2": DemoModel("smollm2", FORGET_FACTS, KEEP_FACTS, RETAIN_FACTS),
    "gemma3-270m": DemoModel(
        "gemma3-270m",
        forget=_pick("Romeo and Juliet", "theory of relativity", "United States", "Harry Potter", "telephone"),
        keep=_pick("Mona Lisa", "Microsoft", "Apple", "gold", "tallest mountain", "Beatles", "week", "hot"),
        retain=_pick("iron", "Statue of Liberty", "water", "human heart"),
        by_rule=True,
        retain_label="other facts",
    ),
}
"""The demo's models by ``prepare-model`` name. Every fact listed is answered greedily by its unedited model (the
Gemma facts: checked with the tokenizer's BOS, as every probe of the package sends it)."""


def demo_model(name: Optional[str]) -> DemoModel:
    """The :data:`DEMO_MODELS` entry of ``name`` (any ``prepare-model`` alias; ``None``: SmolLM2); ``ValueError``
    naming ``--model`` and the choices for any other name (before anything loads)."""
    spec = zoo_model("smollm2" if name is None else name)
    if spec is None or spec.key not in DEMO_MODELS:
        raise ValueError(f"demo --model {name!r}: choose one of {', '.join(DEMO_MODELS)} (a model `zerounlearn "
                         "prepare-model` knows and the demo has facts for)")
    return DEMO_MODELS[spec.key]


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
    hparams_file: str = ""  # the YAML the edit used


def demo_mode(hparams: Any, n_retain: int, retain_label: str) -> str:
    """The method line of the demo's table: the method, then what the edit adds to the paper's (a retain set of
    ``n_retain`` facts, a text weight), or ``(paper)`` where it adds nothing."""
    extras = [f"retain set of {n_retain} {retain_label}"] if n_retain else []
    text_weight = getattr(hparams, "nullspace_text_weight", None)
    if text_weight:
        extras.append(f"text weight {text_weight}")
    return f"{hparams.alg_name} + {' + '.join(extras)}" if extras else f"{hparams.alg_name} (paper)"


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


def _demo_method(hparams_file: Optional[str], paper: bool, spec: Optional[DemoModel] = None
                 ) -> Tuple[Any, Callable[..., Any]]:
    """``(hparams, apply function)`` of a given YAML (either method), else of ``spec``'s (default SmolLM2's)
    retain-aware ZeroUnlearn-GD YAML, else (``paper``) of its paper ZeroUnlearn YAML. ``ValueError`` with the
    reason where ``spec``'s YAML is written by rule (:func:`run_demo` writes it) and no YAML is given."""
    spec = spec or DEMO_MODELS["smollm2"]
    if hparams_file is None:
        if spec.by_rule:
            raise ValueError(f"demo --model {spec.name}: no YAML ships for it; the one by init-hparams' rules needs "
                             "the model loaded (run_demo writes it), or give --hparams")
        hparams_file = hparams_path(*(spec.paper_yaml if paper else spec.yaml))
    return load_method(hparams_file)


def demo_hparams(hparams_file: Optional[str] = None, paper: bool = False, model: Optional[str] = None) -> Any:
    """The demo's hyperparameters (see :func:`_demo_method`; ``model``: a :data:`DEMO_MODELS` name)."""
    return _demo_method(hparams_file, paper, demo_model(model))[0]


def _rule_yaml_model(spec: DemoModel, hparams_file: Optional[str], paper: bool, device: str, dtype: Optional[str]
                     ) -> Tuple[Optional[Tuple[Any, Any]], Optional[str]]:
    """``(model and tokenizer or None, the YAML)``: for a model whose YAML is written by rule (``spec.by_rule``) and
    no ``hparams_file``, the model loaded and the cached YAML by rule (:func:`.rules_yaml.rules_yaml`)."""
    if hparams_file is not None or not spec.by_rule:
        return None, hparams_file
    if paper:
        raise ValueError(f"demo --model {spec.name} --paper: no paper ZeroUnlearn YAML ships for it; give --hparams")
    from zerounlearn_editor.cli.rules_yaml import rules_yaml

    loaded = load_model_and_tokenizer(spec.name, device=device, dtype=dtype)
    return loaded, str(rules_yaml(*loaded, spec.name, spec.forget))


def run_demo(
    hparams_file: Optional[str] = None,
    corpus: Optional[str] = None,
    ppl_tokens: int = 20000,
    device: str = "cpu",
    paper: bool = False,
    dtype: Optional[str] = None,
    ppl_text: Optional[str] = None,
    stats_dir: Optional[str] = None,
    model_name: Optional[str] = None,
) -> DemoResult:
    """Unlearn the demo model's five facts (default :data:`FORGET_FACTS` from SmolLM2) and measure before/after.

    ``model_name``: a :data:`DEMO_MODELS` name (``None``: SmolLM2's facts, the YAML's ``model_name``); given, that
    model is loaded whatever the YAML names. A given ``hparams_file`` of either method is used as is, with the
    model's retain set (prompts and subjects) unless ``paper`` or its retain weights are zero. ``dtype``
    (default: the folder's) is the precision the model is loaded and edited in; ``ppl_text`` defaults to the
    embedded WikiText-2 test split; ``stats_dir`` overrides the YAML's statistics cache folder.
    """
    spec = demo_model(model_name)
    loaded, hparams_file = _rule_yaml_model(spec, hparams_file, paper, device, dtype)
    hparams, apply = _demo_method(hparams_file, paper, spec)
    used = str(hparams_file or hparams_path(*(spec.paper_yaml if paper else spec.yaml)))
    if model_name is not None:
        hparams = hparams.replace(model_name=spec.name)
    if stats_dir is not None:
        hparams = hparams.replace(stats_dir=str(stats_dir))
    corpus = corpus or hparams.mom2_dataset
    retain = None if paper else [{"prompt": p, "subject": s} for p, s, _ in spec.retain]
    if retain is not None and not any(v > 0 for v in hparams.retain_weights().values()):
        retain = None  # a YAML with the paper's (zero) retain weights: nothing to protect with
    mode = demo_mode(hparams, len(retain or []), spec.retain_label)
    LOG.info("demo: %s; model %s (%s) on %s; YAML %s", mode, hparams.model_name, dtype or "stored dtype", device, used)
    from zerounlearn_editor.data.corpus import check_corpus_source

    check_corpus_source(corpus)  # a missing corpus fails now, not after loading and evaluating
    model, tok = loaded or load_model_and_tokenizer(hparams.model_name, device=device, dtype=dtype)
    wikitext = ppl_text or default_ppl_text()
    seconds: Dict[str, float] = {}

    def evaluate(when: str) -> List[Any]:
        LOG.info("scoring %d facts to forget, %d to keep, and perplexity on %d tokens of %s (%s the edit)",
                 len(spec.forget), len(spec.keep), ppl_tokens, Path(wikitext).name, when)
        start = time.perf_counter()
        out = [_scores(model, tok, spec.forget), _scores(model, tok, spec.keep),
               perplexity(model, tok, wikitext, max_tokens=ppl_tokens)]
        seconds[f"evaluate_{when}"] = time.perf_counter() - start
        return out

    before = evaluate("before")
    requests = fact_requests(spec.forget)
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
        forgotten=rows(spec.forget, before[0], after[0]),
        kept=rows(spec.keep, before[1], after[1]),
        ppl_before=before[2],
        ppl_after=after[2],
        seconds=seconds,
        mode=mode,
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        hparams_file=used,
    )


def format_demo(result: DemoResult) -> str:
    """A markdown report of :func:`run_demo`'s result."""
    lines = [f"Method: {result.mode}", f"YAML: {result.hparams_file}", ""]
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
                      paper=args.paper, dtype=args.dtype, ppl_text=args.ppl_text, stats_dir=args.stats_dir,
                      model_name=args.model)
    print(format_demo(result))
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``demo`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "demo", help="forget a few facts from SmolLM2 (or --model gemma3-270m) and print a before/after table",
        parents=[parents.hparams("default: hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml with a retain set "
                                 "of other capitals (with --paper: hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml, no "
                                 "retain set); --model gemma3-270m: the YAML init-hparams' rules write for it (layers "
                                 "by the causal trace of its five facts), cached under <cache>/hparams/rules"),
                 parents.corpus(),
                 parents.ppl(20000, "perplexity tokens (default 20000; 0 = off)",
                             "perplexity text file (default: the embedded WikiText-2 test split)"),
                 parents.stats_dir(), parents.device(), parents.dtype(), parents.quiet(),
                 parents.model(f"a model `prepare-model` knows, with its own facts: {', '.join(DEMO_MODELS)} "
                               "(default smollm2; given, it is loaded whatever the YAML's model_name)",
                               metavar="NAME")],
    )
    p.add_argument("--paper", action="store_true",
                   help="the paper's ZeroUnlearn without a retain set (it also erases the untouched capitals)")
    p.set_defaults(func=_cmd_demo)
