"""Probe prompts of the format and in-context families (pure string functions).

* question form: ``"Q: {question} A:"`` with the fact's own questions where the data has them
  (MQuAKE, RWKU, a facts file's ``questions``), else ``"Q: {prompt} what? A:"``;
* chat template: the model's own template (none: the probe is not applicable) with the user
  asking the question (or ``"Complete: {prompt}"``) and the assistant's turn opened with the
  fact's prompt, so the next token is the answer's first one as in every other probe;
* in-context: ``K`` borrowed facts written ``"{prompt} {answer}.\\n"`` before the prompt.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.audit.items import AuditItem, PoolFact


def question_probes(item: AuditItem) -> List[Probe]:
    """The question-form probes of ``item`` (see module docstring)."""
    if item.questions:
        return [Probe(f"Q: {q.prompt} A:", q.answer) for q in item.questions]
    return [Probe(f"Q: {item.prompt} what? A:", item.answer)]


def chat_probes(tok: Any, item: AuditItem) -> Optional[List[Probe]]:
    """Chat-template probes of ``item`` (``None`` without a template)."""
    if not getattr(tok, "chat_template", None):
        return None
    asks = [q.prompt for q in item.questions] or [f"Complete: {item.prompt}"]
    probes = []
    for ask in asks:
        text = tok.apply_chat_template([{"role": "user", "content": ask}], tokenize=False, add_generation_prompt=True)
        probes.append(Probe(f"{text}{item.prompt}", item.answer))
    return probes


def in_context_probe(item: AuditItem, examples: Sequence[PoolFact]) -> Probe:
    """The item's prompt after its examples: ``"{p1} {a1}.\\n{p2} {a2}.\\n...{prompt}"``."""
    return Probe("".join(f"{e.prompt.strip()} {e.answer.strip()}.\n" for e in examples) + item.prompt, item.answer)
