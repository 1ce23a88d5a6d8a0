"""The audit's probes for one set of forgotten facts, drawn once (seeded) and shared by every row.

:func:`build_plan` turns :class:`~.items.AuditItem` s and a pool of borrowable facts into an
:class:`AuditPlan`: per text probe the prompts of each item, the multiple-choice options, the
relearning data. Base and edited models are scored on the same plan. Prompts:

* question form: ``"Q: {question} A:"`` with the fact's own questions where the data has them
  (MQuAKE, RWKU, a facts file's ``questions``), else ``"Q: {prompt} what? A:"``;
* chat template: the model's own (none: no chat probe), the user asking the question (or
  ``"Complete: {prompt}"``), the assistant's turn opened with the fact's prompt;
* in-context: ``K`` borrowed facts written ``"{prompt} {answer}.\\n"`` before the prompt.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.audit.items import (
    AuditItem,
    PoolFact,
    borrow,
    distractors,
    forbidden_of,
    relearn_facts,
)
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES
from zerounlearn_editor.evaluation.audit.relearn import SCOPES, generic_texts

FAMILIES = ("formats", "in_context", "choice", "lens", "quantization", "relearning", "rwku")
"""Probe families; ``AuditSettings.families`` picks some."""


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
        """Raise ``ValueError`` naming the first bad setting."""
        for name in self.families:
            if name not in FAMILIES:
                raise ValueError(f"audit: unknown probe family {name!r} (known: {', '.join(FAMILIES)})")
        if any(k < 1 for k in self.shots) or self.lens_shots < 1:
            raise ValueError(f"audit: in-context shots must be >= 1, got {self.shots} / lens {self.lens_shots}")
        if self.choices < 2:
            raise ValueError(f"audit: choices must be >= 2, got {self.choices}")
        unknown = [s for s in self.quant_schemes if s not in QUANT_SCHEMES]
        if unknown:
            raise ValueError(f"audit: unknown quantization scheme(s) {unknown} (known: {', '.join(QUANT_SCHEMES)})")
        bad = [s for s in self.relearn_scopes if s not in SCOPES]
        if bad:
            raise ValueError(f"audit: unknown relearning scope(s) {bad} (known: {', '.join(SCOPES)})")
        if self.relearn_steps < 1 or self.relearn_lr <= 0 or self.relearn_n < 1:
            raise ValueError(f"audit: relearning needs steps >= 1, lr > 0, n >= 1; got {self.relearn_steps}, "
                             f"{self.relearn_lr}, {self.relearn_n}")

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

    def describe(self) -> Dict[str, Any]:
        """What was drawn: in-context examples, options, relearning facts (for the JSON)."""
        return {
            "in_context": {str(k): [[f"{e.prompt} {e.answer}" for e in ex] for ex in per_item]
                           for k, per_item in self.in_context_examples.items()},
            "choice_options": self.choice_options,
            "relearn_facts": [f"{p} {a}" for p, a in self.relearn_pairs],
            "generic_texts": len(self.generic),
        }


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


def build_plan(items: Sequence[AuditItem], pool: Sequence[PoolFact], tok: Any, settings: AuditSettings,
               generic_passages: Sequence[str] = ()) -> AuditPlan:
    """Draw every probe of ``settings.families`` for ``items`` (seeded by ``settings.seed``); ``ValueError``
    for no items, or relearning without any allowed fact or generic text."""
    if not items:
        raise ValueError("audit: no forgotten facts with an answer to probe")
    settings.validate()
    plan = AuditPlan(list(items))
    forbidden = forbidden_of(items)
    fam = set(settings.families)
    text = plan.text_probes
    if fam & {"formats", "lens", "quantization", "relearning"}:
        text["prompt"] = [[Probe(i.prompt, i.answer)] for i in items]
    if fam & {"formats", "lens", "quantization"}:
        text["paraphrase"] = [list(i.paraphrases) for i in items]
    if "formats" in fam:
        text["question"] = [[Probe(f"Q: {q.prompt} A:", q.answer) for q in i.questions]
                            or [Probe(f"Q: {i.prompt} what? A:", i.answer)] for i in items]
        chats = [_chat_probes(tok, i) for i in items]
        if all(c is not None for c in chats):
            text["chat"] = chats  # type: ignore[assignment]
    shots = set(settings.shots) if "in_context" in fam else set()
    if fam & {"lens", "quantization"}:
        shots.add(settings.lens_shots)
    for k in sorted(shots):
        examples = [borrow(pool, i.relation, k, forbidden, settings.seed, f"ic:{i.case_id}") for i in items]
        plan.in_context_examples[k] = examples
        text[f"ic{k}"] = [[_in_context_probe(i, ex)] if ex else [] for i, ex in zip(items, examples)]
    if "choice" in fam:
        plan.choice_options = [[i.answer, *distractors(i, pool, settings.choices - 1, forbidden, settings.seed)]
                               for i in items]
    if "rwku" in fam:
        for name in ("fill_in_blank", "question", "adversarial"):
            if any(name in i.groups for i in items):
                text[f"rwku_{name}"] = [list(i.groups.get(name, ())) for i in items]
    if "relearning" in fam:
        facts = relearn_facts(items, pool, settings.relearn_n, forbidden, settings.seed)
        plan.relearn_pairs = [(f.prompt, f.answer) for f in facts]
        plan.generic = generic_texts(generic_passages, max(len(facts), 1), settings.generic_words, forbidden)
        if not plan.relearn_pairs or not plan.generic:
            raise ValueError(f"audit relearning: {len(plan.relearn_pairs)} related facts and {len(plan.generic)} generic "
                             "texts naming no forgotten subject or answer; need at least one of each")
    return plan
