"""Scoring one model state on a seed's cases: the table's numbers and EasyEdit-style dicts.

* Efficacy / Generalization: teacher-forced token accuracy x100 of the **true** answer on the
  forget prompts / paraphrases (lower = more forgotten), and the mean answer probability.
* Specificity: token accuracy x100 of the neighbourhood prompts' own answers (higher = better
  kept), its probability, and (after an edit) the pre/post agreement of the argmax tokens.
  Given the batch's ``named`` marks (:func:`.neighbours.neighbours_naming_forgotten_subjects`),
  also ``spe_distinct``: the same over the neighbour prompts that name no forgotten subject, and
  ``neighbours_named``: how many do (a diagnostic; ``spe`` scores every neighbour).
* Per case the probe values are averaged first, then cases are averaged (EasyEdit's summary).
* Probe groups (cases with ``probe_groups``, e.g. RWKU's ``forget_level1`` ... ``neighbor_level2``):
  the same token accuracy x100 per group, as metrics ``group_<name>`` (cases without probes in
  a group are left out of its mean). A group probe that is also one of the case's forget /
  paraphrase / neighbour probes is scored once.
* With ``group_generation``: per probe group, % of probes whose greedy continuation
  (``GROUP_GENERATION_TOKENS`` new tokens) contains the answer (case-insensitive, whitespace
  collapsed), as metrics ``contains_<name>``: closer to RWKU's own generation-based scoring.
* Perplexity on the first ``ppl_tokens`` tokens of a text; fluency = n-gram entropy of greedy
  generations of the forget prompts.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Any, Dict, List, Optional, Sequence

from torch import nn

from zerounlearn_editor.data.types import Probe, UnlearnCase
from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.evaluation.fluency import ngram_entropy
from zerounlearn_editor.evaluation.generation import generate_greedy
from zerounlearn_editor.evaluation.metrics import ProbeScores, evaluate_probes
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, perplexity, read_text

__all__ = [
    "METRIC_KEYS",
    "GROUP_PREFIX",
    "CONTAINS_PREFIX",
    "AUDIT_PREFIX",
    "GROUP_GENERATION_TOKENS",
    "answer_contained",
    "ScoringSettings",
    "score_cases",
    "probe_metrics",
    "model_metrics",
    "ppl_token_count",
]

METRIC_KEYS = (
    "eff",
    "gen",
    "spe",
    "spe_distinct",
    "neighbours_named",
    "eff_first",
    "gen_first",
    "eff_prob",
    "gen_prob",
    "spe_prob",
    "spe_agree",
    "ppl",
    "fluency",
    "edit_seconds",
)
GROUP_PREFIX = "group_"
"""Metric key of a probe group: ``GROUP_PREFIX + name`` (e.g. ``group_forget_level1``)."""
CONTAINS_PREFIX = "contains_"
AUDIT_PREFIX = "audit:"
"""Metric key of a robustness-audit probe (``zerounlearn bench --audit``): ``AUDIT_PREFIX + probe``, recovered %."""
"""Metric key of a probe group's generation score: ``CONTAINS_PREFIX + name``."""
GROUP_GENERATION_TOKENS = 16
"""New tokens of the greedy continuation of a group probe (answers are short: names, years)."""


@dataclass(frozen=True)
class ScoringSettings:
    """How a model state is scored."""

    batch_size: int = 32
    ppl_text: Optional[str] = None
    ppl_tokens: int = 20000
    fluency: bool = False
    fluency_tokens: int = 32
    utility: Optional[str] = None
    utility_n: int = 50
    group_generation: bool = False


def ppl_token_count(tok: Any, settings: ScoringSettings) -> Optional[int]:
    """The tokens a perplexity under ``settings`` scores: the first ``ppl_tokens`` of the text, fewer when the text
    is shorter (what a table reports, not the option); ``None`` without a perplexity."""
    if settings.ppl_tokens <= 0 or settings.ppl_text is None:
        return None
    return len(leading_token_ids(tok, read_text(settings.ppl_text), settings.ppl_tokens))


def _slice(scores: ProbeScores, start: int, stop: int) -> ProbeScores:
    return {key: values[start:stop] for key, values in scores.items()}  # type: ignore[return-value]


def _take(scores: ProbeScores, indices: Sequence[int]) -> ProbeScores:
    return {key: [values[i] for i in indices] for key, values in scores.items()}  # type: ignore[return-value]


def score_cases(model: nn.Module, tok: Any, cases: Sequence[UnlearnCase], batch_size: int = 32) -> List[CaseScores]:
    """Forget/paraphrase/neighbour (and probe-group) scores of every case, all probes batched together."""
    probes: List[Probe] = []
    bounds = []
    group_indices: List[Dict[str, List[int]]] = []
    for case in cases:
        start = len(probes)
        probes += case.forget
        mid1 = len(probes)
        probes += case.paraphrase
        mid2 = len(probes)
        probes += case.neighbour
        bounds.append((start, mid1, mid2, len(probes)))
        known: Dict[Probe, int] = {}
        for index in range(len(probes) - 1, start - 1, -1):
            known[probes[index]] = index  # first occurrence wins
        groups: Dict[str, List[int]] = {}
        for name, members in case.probe_groups.items():
            indices = []
            for probe in members:
                if probe not in known:
                    known[probe] = len(probes)
                    probes.append(probe)
                indices.append(known[probe])
            groups[name] = indices
        group_indices.append(groups)
    scores = evaluate_probes(model, tok, probes, batch_size)
    return [
        CaseScores(
            forget=_slice(scores, a, b),
            paraphrase=_slice(scores, b, c),
            neighbour=_slice(scores, c, d),
            groups={name: _take(scores, indices) for name, indices in groups.items()},
        )
        for (a, b, c, d), groups in zip(bounds, group_indices)
    ]


def _case_mean(groups: Sequence[Sequence[float]]) -> float:
    means = [fmean(g) for g in groups if len(g)]
    return fmean(means) if means else float("nan")


def _agreement(pre: Sequence[int], post: Sequence[int]) -> List[float]:
    return [float(a == b) for a, b in zip(pre, post)]


def probe_metrics(post: Sequence[CaseScores], pre: Optional[Sequence[CaseScores]] = None,
                  named: Optional[Sequence[Sequence[bool]]] = None) -> Dict[str, float]:
    """Efficacy/generalization/specificity (x100) and probabilities; ``spe_agree`` needs ``pre``;
    ``spe_distinct`` / ``neighbours_named`` need ``named`` (``[cases][neighbour probes]`` booleans).

    Cases with probe groups add ``group_<name>`` (token accuracy x100 per group, see module doc).
    """
    out = {
        "eff": 100.0 * _case_mean([s.forget["acc"] for s in post]),
        "gen": 100.0 * _case_mean([s.paraphrase["acc"] for s in post]),
        "spe": 100.0 * _case_mean([s.neighbour["acc"] for s in post]),
        "eff_first": 100.0 * _case_mean([s.forget["first_acc"] for s in post]),
        "gen_first": 100.0 * _case_mean([s.paraphrase["first_acc"] for s in post]),
        "eff_prob": _case_mean([s.forget["prob"] for s in post]),
        "gen_prob": _case_mean([s.paraphrase["prob"] for s in post]),
        "spe_prob": _case_mean([s.neighbour["prob"] for s in post]),
    }
    if pre is not None:
        per_case = []
        for before, after in zip(pre, post):
            per_case.append(
                [
                    fmean(_agreement(a, b))
                    for a, b in zip(before.neighbour["pred_ids"], after.neighbour["pred_ids"])
                    if a
                ]
            )
        out["spe_agree"] = 100.0 * _case_mean(per_case)
    if named is not None:
        if [len(m) for m in named] != [len(s.neighbour["acc"]) for s in post]:
            raise ValueError("named: one mark per neighbour probe of every case expected")
        out["spe_distinct"] = 100.0 * _case_mean(
            [[a for a, m in zip(s.neighbour["acc"], marks) if not m] for s, marks in zip(post, named)])
        out["neighbours_named"] = float(sum(sum(marks) for marks in named))
    names = list(dict.fromkeys(name for s in post for name in s.groups))
    for name in names:
        out[GROUP_PREFIX + name] = 100.0 * _case_mean([s.groups[name]["acc"] for s in post if name in s.groups])
    return out


def answer_contained(answer: str, text: str) -> bool:
    """Whether ``answer`` occurs in ``text``, case-insensitive, runs of whitespace collapsed."""
    norm_answer = " ".join(answer.lower().split())
    return bool(norm_answer) and norm_answer in " ".join(text.lower().split())


def group_generation_metrics(
    model: nn.Module, tok: Any, cases: Sequence[UnlearnCase], batch_size: int
) -> Dict[str, float]:
    """``contains_<group>``: % of group probes whose greedy continuation contains the answer.

    Per case the probes of a group are averaged, then the cases that have the group.
    """
    probes = list(dict.fromkeys(p for case in cases for members in case.probe_groups.values() for p in members))
    if not probes:
        return {}
    texts = generate_greedy(model, tok, [p.prompt for p in probes], GROUP_GENERATION_TOKENS, batch_size=batch_size)
    hit = {probe: float(answer_contained(probe.answer, text)) for probe, text in zip(probes, texts)}
    names = list(dict.fromkeys(name for case in cases for name in case.probe_groups))
    return {
        CONTAINS_PREFIX + name: 100.0 * _case_mean([[hit[p] for p in c.probe_groups.get(name, [])] for c in cases])
        for name in names
    }


def model_metrics(
    model: nn.Module, tok: Any, cases: Sequence[UnlearnCase], settings: ScoringSettings
) -> Dict[str, Any]:
    """Perplexity and (optionally) fluency of the model's current state.

    Returns ``{"ppl": float or None, "fluency": float or None, "generations": [...]}``, plus
    ``"utility"`` and ``"contains"`` (metric dicts) when asked for.
    """
    out: Dict[str, Any] = {"ppl": None, "fluency": None}
    if settings.ppl_tokens > 0:
        if settings.ppl_text is None:
            raise ValueError("no perplexity text given")
        out["ppl"] = perplexity(model, tok, settings.ppl_text, max_tokens=settings.ppl_tokens)
    if settings.fluency:
        prompts = [probe.prompt for case in cases for probe in case.forget]
        texts = generate_greedy(model, tok, prompts, settings.fluency_tokens, batch_size=settings.batch_size)
        out["fluency"] = ngram_entropy(texts)
        out["generations"] = texts
    if settings.utility:
        from zerounlearn_editor.evaluation.utility import load_task_items, parse_tasks, score_tasks
        from zerounlearn_editor.support.resources import shared_file

        data_dir = shared_file("utility/mmlu.json").parent
        items = {t: load_task_items(t, data_dir, settings.utility_n, 3) for t in parse_tasks(settings.utility)}
        scores = score_tasks(model, tok, items, settings.batch_size)
        out["utility"] = {f"util_{t}": 100.0 * s["accuracy"] for t, s in scores.items()}
    if settings.group_generation:
        out["contains"] = group_generation_metrics(model, tok, cases, settings.batch_size)
    return out
