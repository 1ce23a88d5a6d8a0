"""A pool of facts the model writes itself, for ``retain-set --generate`` where the user has no pool of facts.

For each fact ``{"prompt", "subject", "answer"}`` (the prompt contains the subject) the model reads
``"<prompt> <answer>.\\nOther examples: <subject>,"`` and samples a few continuations (top-k :data:`TOP_K`,
temperature 1; deterministic in the seed): a list of names like the subject. Each name of a continuation's first line
(split at commas and " and "; capitalised or a digit first, at most :data:`MAX_NAME_CHARS` characters, no markup, no
fact's subject and not part of one) is put in the fact's prompt in the subject's place with the fact's answer, and
kept where the model knows it (:func:`~zerounlearn_editor.applications.retain_set.known_facts_mask`). The records
are a pool for :func:`~zerounlearn_editor.applications.retain_set.build_retain_set`, which draws the same-answer
retain set from it as from any pool. Measured for Gemma-3-270m ``--many`` at 1,000 facts: benchmarks/RESULTS.md 12.37.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Optional, Sequence

LOG = logging.getLogger(__name__)

__all__ = ["TOP_K", "MAX_NAME_CHARS", "list_context", "names_in", "sample_candidates", "generate_pool"]

TOP_K = 40
MAX_NAME_CHARS = 60
_LIST_SPLIT = re.compile(r",| and ")


def list_context(fact: Dict[str, str]) -> str:
    """The text the model continues for one fact: its line with the answer, then a list opened by its subject."""
    return f"{fact['prompt']} {fact['answer']}.\nOther examples: {fact['subject']},"


def names_in(continuation: str, facts: Sequence[Dict[str, str]]) -> List[str]:
    """The names of ``continuation``'s first line, in order, that pass the module docstring's filter against
    ``facts`` (a name holding a fact's subject, or held by one, is left out)."""
    names = []
    for part in _LIST_SPLIT.split(continuation.split("\n", 1)[0]):
        name = part.strip().rstrip(".;:")
        if (name and (name[0].isupper() or name[0].isdigit()) and len(name) <= MAX_NAME_CHARS and "<" not in name
                and not any(f["subject"] in name or name in f["subject"] for f in facts)):
            names.append(name)
    return names


def sample_candidates(model: Any, tok: Any, fact: Dict[str, str], facts: Sequence[Dict[str, str]], samples: int,
                      new_tokens: int, seed: int) -> List[Dict[str, str]]:
    """One fact's candidate records ``{"prompt", "subject", "answer"}`` (``samples`` continuations of ``new_tokens``
    tokens, seeded by ``seed``), in the order sampled (a name listed twice, twice); ``[]`` where the prompt lacks the
    subject."""
    import torch

    if fact["subject"] not in fact["prompt"]:
        return []
    before, after = fact["prompt"].split(fact["subject"], 1)
    ids = tok(list_context(fact), return_tensors="pt")["input_ids"].to(model.device)  # [1, t]
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(ids.repeat(samples, 1), attention_mask=torch.ones_like(ids).repeat(samples, 1),
                             do_sample=True, top_k=TOP_K, temperature=1.0, max_new_tokens=new_tokens,
                             pad_token_id=tok.eos_token_id)  # [samples, t + new]
    return [{"prompt": f"{before}{name}{after}", "subject": name, "answer": fact["answer"]}
            for row in out[:, ids.shape[1]:] for name in names_in(tok.decode(row, skip_special_tokens=True), facts)]


def generate_pool(model: Any, tok: Any, facts: Sequence[Dict[str, Any]], samples: int = 4, new_tokens: int = 24,
                  seed: int = 0, serve: Optional[Sequence[bool]] = None) -> List[Dict[str, str]]:
    """The pool the model writes for ``facts`` (those with an answer that ``serve``, when given, marks True: the
    facts a retain set is drawn for; fact ``i`` sampled with seed ``seed + i``): every candidate record, first
    occurrence of each prompt kept, that the model knows. Names are checked against every fact's subject."""
    from zerounlearn_editor.applications.retain_set import known_facts_mask
    from zerounlearn_editor.support.progress import progress_bar

    if serve is not None and len(serve) != len(facts):
        raise ValueError(f"serve has {len(serve)} entries for {len(facts)} facts")
    served = [bool(f.get("answer")) and (serve is None or serve[i]) for i, f in enumerate(facts)]
    candidates: List[Dict[str, str]] = []
    seen = set()
    for index, fact in enumerate(progress_bar(facts, desc="names the model lists", unit="fact")):
        if not served[index]:
            continue
        for record in sample_candidates(model, tok, fact, facts, samples, new_tokens, seed + index):
            if record["prompt"] not in seen:
                seen.add(record["prompt"])
                candidates.append(record)
    pool = [r for r, known in zip(candidates, known_facts_mask(model, tok, candidates) if candidates else []) if known]
    LOG.info("generated pool: %d candidate records, %d the model knows, for %d facts", len(candidates), len(pool),
             sum(served))
    return pool
