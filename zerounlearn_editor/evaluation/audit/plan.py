"""The audit's probes for one set of forgotten facts, drawn once (seeded) and shared by every row.

:func:`build_plan` turns :class:`~.items.AuditItem` s and a pool of borrowable facts into an
:class:`AuditPlan`: per text probe the prompts of each item, the multiple-choice options, the
relearning data. Base and edited models are scored on the same plan. Prompts:

* question form: ``"Q: {question} A:"`` with the fact's own questions where the data has them
  (MQuAKE, RWKU, a facts file's ``questions``), else ``"Q: {prompt} what? A:"``;
* chat template: the model's own (none: no chat probe), the user asking the question (or
  ``"Complete: {prompt}"``), the assistant's turn opened with the fact's prompt;
* in-context: ``K`` borrowed facts written ``"{prompt} {answer}.\\n"`` before the prompt (``K`` capped at the
  facts that can be borrowed; the column is named by the ``K`` used).

Callers run :func:`check_audit_inputs` (no model needed: settings, RWKU levels, something to borrow, generic
text) before loading a model and :func:`check_plan_lengths` (positions) before scoring.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.audit.items import (
    AuditItem,
    PoolFact,
    allowed_facts,
    borrow,
    distractor_facts,
    forbidden_of,
    relearn_facts,
    rtt_split,
    same_relation,
)
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES
from zerounlearn_editor.evaluation.audit.relearn import SCOPES, generic_texts

LOG = logging.getLogger(__name__)

class AuditError(ValueError):
    """A bad audit setting or a probe that cannot be measured (the message names it and what to do)."""


MAX_RELEARN_LR = 1.0
"""The largest relearning learning rate accepted (Adam steps of this size already wreck a language model)."""

FAMILIES = ("formats", "in_context", "choice", "lens", "quantization", "relearning", "rtt", "rwku")
"""Probe families; ``AuditSettings.families`` picks some. ``rtt``: fine-tune on half of the forgotten facts, measure
the other half (the split of Deeb & Roger, arXiv 2410.08827); it needs at least 2 facts (through ``all`` it is left
out, with a warning, when there is one)."""


def parse_families(spec: str) -> Tuple[str, ...]:
    """``"all"`` or a comma list of :data:`FAMILIES`; an unknown name is an error naming it."""
    if spec.strip() == "all":
        return FAMILIES
    names = tuple(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    unknown = [n for n in names if n not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"audit probes: unknown famil{'ies' if len(unknown) > 1 else 'y'} {unknown or spec!r}; "
                         f"choose from {', '.join(FAMILIES)} or all")
    return names


@dataclass(frozen=True)
class AuditSettings:
    """How the audit probes (see the package docstring for each family)."""

    families: Tuple[str, ...] = FAMILIES
    shots: Tuple[int, ...] = (1, 3, 5)
    lens_shots: int = 3
    choices: int = 4
    top_k: int = 10
    quant_schemes: Tuple[str, ...] = ("int8", "int4", "int4g16")
    relearn_steps: int = 10
    relearn_lr: float = 1e-4
    relearn_scopes: Tuple[str, ...] = SCOPES
    relearn_n: int = 32
    generic_words: int = 24
    batch_size: int = 16
    seed: int = 0

    def validate(self) -> None:
        """Raise :class:`AuditError` naming the first bad setting (every integer a whole number in range,
        ``relearn_lr`` finite and > 0: an infinite or NaN step would give NaN weights, which read as 0 % recovered)."""
        for name in self.families:
            if name not in FAMILIES:
                raise AuditError(f"audit: unknown probe family {name!r} (known: {', '.join(FAMILIES)})")
        counts = {"shots": self.shots, "lens_shots": (self.lens_shots,), "choices": (self.choices,),
                  "top_k": (self.top_k,), "relearn_steps": (self.relearn_steps,), "relearn_n": (self.relearn_n,),
                  "generic_words": (self.generic_words,), "batch_size": (self.batch_size,)}
        for name, values in counts.items():
            if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
                raise AuditError(f"audit: {name} must be whole numbers, got {values!r}")
        if any(k < 1 for k in self.shots) or self.lens_shots < 1:
            raise AuditError(f"audit: in-context shots must be >= 1, got {self.shots} / lens {self.lens_shots}")
        if self.choices < 2:
            raise AuditError(f"audit: choices must be >= 2, got {self.choices}")
        if self.top_k < 1 or self.generic_words < 2:
            raise AuditError(
                f"audit: top_k must be >= 1 and generic_words >= 2, got {self.top_k}, {self.generic_words}"
            )
        if self.batch_size < 1:
            raise AuditError(f"audit: batch size must be >= 1 (probes per forward pass), got {self.batch_size}; "
                             "give e.g. --batch-size 16")
        unknown = [s for s in self.quant_schemes if s not in QUANT_SCHEMES]
        if unknown:
            raise AuditError(f"audit: unknown quantization scheme(s) {unknown} (known: {', '.join(QUANT_SCHEMES)})")
        bad = [s for s in self.relearn_scopes if s not in SCOPES]
        if bad:
            raise AuditError(f"audit: unknown relearning scope(s) {bad} (known: {', '.join(SCOPES)})")
        lr = self.relearn_lr
        if (
            isinstance(lr, bool)
            or not isinstance(lr, (int, float))
            or not math.isfinite(lr)
            or not 0 < lr <= MAX_RELEARN_LR
        ):
            raise AuditError(f"audit: relearning learning rate (--relearn-lr) must be a finite number in "
                             f"(0, {MAX_RELEARN_LR}], got {lr!r}; the default is 1e-4")
        if self.relearn_steps < 1 or self.relearn_n < 1:
            raise AuditError(
                f"audit: relearning needs steps >= 1 and n >= 1; got {self.relearn_steps}, {self.relearn_n}"
            )

    def check_fact_count(self, n_facts: int) -> None:
        """:class:`AuditError` when ``rtt`` is asked for (not through ``all``, which leaves it out) and fewer than
        2 facts are audited: it fine-tunes on half of them and measures the other half."""
        if "rtt" in self.families and tuple(self.families) != FAMILIES and n_facts < 2:
            raise AuditError(f"audit probes: rtt asked for, but it needs at least 2 forgotten facts (it fine-tunes on "
                             f"half of them and measures the other half), got {n_facts}; audit more facts (--n) or "
                             "drop rtt from the probes (--probes / --audit-probes)")

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class AuditPlan:
    """Everything drawn for one set of items (JSON-able through :meth:`describe`)."""

    items: List[AuditItem]
    text_probes: Dict[str, List[List[Probe]]] = field(default_factory=dict)
    choice_options: List[List[str]] = field(default_factory=list)
    relearn_pairs: List[Tuple[str, str]] = field(default_factory=list)
    generic: List[str] = field(default_factory=list)
    in_context_examples: Dict[int, List[List[PoolFact]]] = field(default_factory=dict)
    shots: Tuple[int, ...] = ()
    """The in-context counts of the ``icK`` columns: the requested ones, capped at the facts that can be borrowed."""
    lens_shots: int = 0
    """The in-context count the lens and quantization probes read (capped like :attr:`shots`)."""
    rtt_trained: List[int] = field(default_factory=list)
    """The ``rtt`` probe's fine-tuning half: indices into :attr:`items` (empty: no ``rtt`` probe)."""
    rtt_held_out: List[int] = field(default_factory=list)
    """The ``rtt`` probe's measured half: the other indices (:func:`~.items.rtt_split`)."""
    same_relation: Dict[str, int] = field(default_factory=dict)
    """Per borrowing probe (``icK``, ``mc``, ``relearn``): how many items got same-relation material (icK: all K
    examples, mc: every distractor of the item's relation; relearn: at least one relearning fact of it)."""

    def describe(self) -> Dict[str, Any]:
        """What was drawn: in-context examples, options, relearning facts, the ``rtt`` split (case ids of each half,
        and how many held-out facts share their answer with a trained one), same-relation counts (for the JSON)."""
        described = {
            "n_items": len(self.items),
            "same_relation": dict(self.same_relation),
            "in_context": {str(k): [[f"{e.prompt} {e.answer}" for e in ex] for ex in per_item]
                           for k, per_item in self.in_context_examples.items()},
            "choice_options": self.choice_options,
            "relearn_facts": [f"{p} {a}" for p, a in self.relearn_pairs],
            "generic_texts": len(self.generic),
        }
        if self.rtt_held_out:
            trained_answers = {self.items[i].answer.strip().lower() for i in self.rtt_trained}
            described["rtt"] = {
                "trained": [self.items[i].case_id for i in self.rtt_trained],
                "held_out": [self.items[i].case_id for i in self.rtt_held_out],
                "held_out_sharing_an_answer": sum(
                    1 for i in self.rtt_held_out if self.items[i].answer.strip().lower() in trained_answers),
            }
        return described


def _chat_probes(tok: Any, item: AuditItem) -> Optional[List[Probe]]:
    if not getattr(tok, "chat_template", None):
        return None
    asks = [q.prompt for q in item.questions] or [f"Complete: {item.prompt}"]
    chats = [tok.apply_chat_template([{"role": "user", "content": ask}], tokenize=False,
                                     add_generation_prompt=True) for ask in asks]
    return [Probe(f"{chat}{item.prompt}", item.answer) for chat in chats]


def _in_context_probe(item: AuditItem, examples: Sequence[PoolFact]) -> Probe:
    shots = "".join(f"{e.prompt.strip()} {e.answer.strip()}.\n" for e in examples)
    return Probe(shots + item.prompt, item.answer)


def _why_none_left(texts: Sequence[str], items: Sequence[AuditItem]) -> str:
    """The forgotten subjects / answers that rule out the most of ``texts``, named with their fact."""
    counts = []
    for item in items:
        for kind, word in (("subject", item.subject), ("answer", item.answer)):
            hits = sum(1 for t in texts if word.strip().lower() in t.lower())
            counts.append((hits, f"{kind} {word.strip()!r} of fact {item.case_id} (in {hits} of {len(texts)})"))
    counts.sort(key=lambda c: -c[0])
    return "; ".join(text for hits, text in counts[:3] if hits)


def check_families(items: Sequence[AuditItem], settings: AuditSettings) -> None:
    """:class:`AuditError` for bad settings, no item, ``rwku`` asked for (not through ``all``, which
    takes RWKU's levels where the data has them) when no item has RWKU probe levels, or ``rtt`` asked for (not
    through ``all``) with fewer than 2 items."""
    settings.validate()
    if not items:
        raise AuditError("audit: no forgotten facts with an answer to probe")
    if "rwku" in settings.families and tuple(settings.families) != FAMILIES and not any(i.groups for i in items):
        raise AuditError(f"audit probes: rwku asked for, but none of the {len(items)} facts has RWKU probe levels "
                         "(forget_level1-3: only the rwku dataset has them); drop rwku from the probes")
    settings.check_fact_count(len(items))


def check_audit_inputs(items: Sequence[AuditItem], pool: Sequence[PoolFact], settings: AuditSettings,
                       generic_passages: Sequence[str] = ()) -> None:
    """The checks of :func:`build_plan` that need no model or tokenizer (callers run it before loading one):
    :class:`AuditError` when there is no fact, when ``rwku`` is asked for (not through ``all``) and no fact
    has RWKU levels, when the in-context or relearning probes find no fact to borrow, or when every
    generic passage names a forgotten subject or answer (naming the words that rule them out)."""
    check_families(items, settings)
    fam = set(settings.families)
    forbidden = forbidden_of(items)
    allowed = allowed_facts(pool, forbidden)
    if fam & {"in_context", "choice", "relearning", "lens", "quantization"} and not allowed:
        raise AuditError(
            f"audit: none of the {len(pool)} facts the audit may borrow (in-context examples, distractors, "
            "relearning facts) is free of the forgotten subjects and answers "
            f"({_why_none_left([f'{f.prompt} {f.answer}' for f in pool], items) or 'no pool'}); "
            "leave in_context, choice, lens, quantization and relearning out of the probes"
        )
    if "relearning" in fam:
        texts = generic_texts(generic_passages, 1, settings.generic_words, forbidden)
        if not texts:
            cut = [" ".join(p.split()[: settings.generic_words]) for p in generic_passages]
            raise AuditError(
                f"audit relearning: no generic text is left for the control: every one of the {len(cut)} passages "
                f"names a forgotten subject or answer ({_why_none_left(cut, items) or 'no passage'}); fix that "
                "fact's subject / answer, or leave relearning out of the probes")


def build_plan(items: Sequence[AuditItem], pool: Sequence[PoolFact], tok: Any, settings: AuditSettings,
               generic_passages: Sequence[str] = ()) -> AuditPlan:
    """Draw every probe of ``settings.families`` for ``items`` (seeded by ``settings.seed``) after
    :func:`check_audit_inputs`. In-context counts above the number of facts that can be borrowed are capped
    (a warning names the column actually used); a warning names every borrowing probe for which fewer than
    half of the items got same-relation material (:attr:`AuditPlan.same_relation`)."""
    check_audit_inputs(items, pool, settings, generic_passages)
    plan = AuditPlan(list(items))
    forbidden = forbidden_of(items)
    available = len(allowed_facts(pool, forbidden))
    fam = set(settings.families)
    text = plan.text_probes
    if fam & {"formats", "lens", "quantization", "relearning", "rtt"}:
        text["prompt"] = [[Probe(i.prompt, i.answer)] for i in items]
    if fam & {"formats", "lens", "quantization"}:
        text["paraphrase"] = [list(i.paraphrases) for i in items]
    if "formats" in fam:
        text["question"] = [[Probe(f"Q: {q.prompt} A:", q.answer) for q in i.questions]
                            or [Probe(f"Q: {i.prompt} what? A:", i.answer)] for i in items]
        chats = [_chat_probes(tok, i) for i in items]
        if all(c is not None for c in chats):
            text["chat"] = chats  # type: ignore[assignment]
    asked = list(settings.shots) if "in_context" in fam else []
    if fam & {"lens", "quantization"}:
        asked.append(settings.lens_shots)
    for k in sorted(set(asked)):
        if k > available:
            LOG.warning(
                "audit: %d in-context examples asked for, but only %d facts can be borrowed (naming no forgotten "
                "subject or answer); the column is ic%d",
                k,
                available,
                available,
            )
    plan.shots = tuple(sorted({min(k, available) for k in settings.shots})) if "in_context" in fam else ()
    plan.lens_shots = min(settings.lens_shots, available)
    shots = set(plan.shots) | ({plan.lens_shots} if fam & {"lens", "quantization"} else set())
    for k in sorted(shots):
        examples = [borrow(pool, i.relation, k, forbidden, settings.seed, f"ic:{i.case_id}") for i in items]
        plan.in_context_examples[k] = examples
        text[f"ic{k}"] = [[_in_context_probe(i, ex)] if ex else [] for i, ex in zip(items, examples)]
        if k in plan.shots:
            plan.same_relation[f"ic{k}"] = sum(
                1 for i, ex in zip(items, examples) if ex and same_relation(i, ex) == len(ex)
            )
    if "choice" in fam:
        picked = [distractor_facts(i, pool, settings.choices - 1, forbidden, settings.seed) for i in items]
        plan.choice_options = [[i.answer, *(f.answer.strip() for f in facts)] for i, facts in zip(items, picked)]
        plan.same_relation["mc"] = sum(
            1 for i, facts in zip(items, picked) if facts and same_relation(i, facts) == len(facts)
        )
    if "rwku" in fam:
        for name in ("fill_in_blank", "question", "adversarial"):
            if any(name in i.groups for i in items):
                text[f"rwku_{name}"] = [list(i.groups.get(name, ())) for i in items]
    if "relearning" in fam:
        facts = relearn_facts(items, pool, settings.relearn_n, forbidden, settings.seed)
        plan.relearn_pairs = [(f.prompt, f.answer) for f in facts]
        plan.generic = generic_texts(generic_passages, max(len(facts), 1), settings.generic_words, forbidden)
        plan.same_relation["relearn"] = sum(1 for i in items if same_relation(i, facts))
    if "rtt" in fam:
        if len(items) < 2:
            LOG.warning("audit: the rtt probe needs at least 2 forgotten facts, got %d: it is left out", len(items))
        else:
            plan.rtt_trained, plan.rtt_held_out = rtt_split(len(items), settings.seed)
    for probe, count in plan.same_relation.items():
        if 2 * count < len(items):
            LOG.warning(
                "audit: only %d of %d facts got same-relation material for the %s probe (the pool of borrowable "
                "facts has too few of their relations); its recovered %% is a weak test",
                count,
                len(items),
                probe,
            )
    return plan


def check_plan_lengths(plan: AuditPlan, tok: Any, limit: Optional[int]) -> None:
    """:class:`AuditError` when a probe (prompt and answer) of ``plan`` needs more positions than ``limit``
    (the model's position embeddings, GPT-2: ``n_positions``; ``None`` = unbounded), naming the fact and the probe."""
    if limit is None:
        return
    from zerounlearn_editor.evaluation.batching import encode_probe

    checks: List[Tuple[str, int, Probe]] = [(name, index, probe) for name, per_item in plan.text_probes.items()
                                            for index, probes in enumerate(per_item) for probe in probes]
    checks += [("mc", index, Probe(item.prompt, option)) for index, (item, options)
               in enumerate(zip(plan.items, plan.choice_options)) for option in options]
    for name, index, probe in checks:
        length = len(encode_probe(tok, probe).input_ids)
        if length > limit:
            item = plan.items[index]
            fix = "lower --shots" if name.startswith("ic") else "shorten that fact's probes"
            raise AuditError(f"audit: fact {item.case_id} ({item.prompt[:60]!r}): its {name} probe needs {length} "
                             f"positions, more than the model's {limit}; {fix} or leave that probe family out")
