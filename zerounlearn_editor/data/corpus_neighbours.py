"""Candidate retain facts drafted from general text, for a user who has only the facts to forget.

A same-answer retain set (:mod:`.answer_retain`) needs a pool of facts with answers. Without one, the facts to
forget still give a relation template each (the prompt with its subject cut out: ``"The native language of {} is"``)
and an answer (``" French"``); a passage of general text that names the answer names, nearby, other entities that
may share it (``Paris``, ``Jean Rouch``). :func:`corpus_candidates` puts the names that occur most often in the
passages mentioning a fact's answer into that fact's template, as candidate records ``{"prompt", "subject",
"answer"}``; which of them the model actually answers with the fact's answer is the caller's test (the known test of
:func:`~zerounlearn_editor.applications.retain_set.known_facts_mask`), and the draw keeps only eligible ones
(:func:`~zerounlearn_editor.data.answer_retain.eligible_pool`).

Pure: text in, records out (no model, no files). Names are runs of capitalised words (``Berlin International Film
Festival``, ``Congress of Vienna``), joined by at most one lower-case particle (of, de, von, ...), at most
:data:`MAX_NAME_WORDS` words (an abbreviation such as ``U.S.`` is one word); a run opening a sentence loses a first word the text also
writes in lower case (``In Paris`` -> ``Paris``), and a single capitalised word opening a sentence is not a name.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence

__all__ = ["MAX_NAME_WORDS", "fact_template", "lower_case_words", "entity_names", "corpus_candidates"]

MAX_NAME_WORDS = 5
"""Longest name, in words, taken from the text."""

_WORD = r"(?:(?:[A-Z]\.){2,}|[A-Z][\w'&-]*)"
_PARTICLE = r"(?:of|de|du|da|la|le|von|van|der)"
_NAME = re.compile(rf"{_WORD}(?:\s+(?:{_PARTICLE}\s+)?{_WORD})*")
_OPENERS = frozenset("A An And As At But By During For From His Her In Its Of On Their The This That These Those To "
                     "When While With After Before".split())
"""Words :func:`entity_names` cuts from the front of a run that opens a sentence when it is given no vocabulary."""


def fact_template(prompt: str, subject: str) -> Optional[str]:
    """``prompt`` with the first occurrence of ``subject`` replaced by ``{}`` (literal braces of the prompt
    doubled, so ``template.format(name)`` rebuilds it), or ``None`` when the subject is empty or absent."""
    if not subject or subject not in prompt:
        return None
    head, tail = prompt.split(subject, 1)
    return head.replace("{", "{{").replace("}", "}}") + "{}" + tail.replace("{", "{{").replace("}", "}}")


def lower_case_words(texts: Sequence[str]) -> FrozenSet[str]:
    """Every word written in lower case somewhere in ``texts``: a capitalised word among them that opens a sentence
    is an ordinary word, not a name (``Then``, ``However``)."""
    return frozenset(word for text in texts for word in re.findall(r"(?<![\w'-])[a-z][a-z'-]*", text))


def entity_names(text: str, common_words: Optional[FrozenSet[str]] = None) -> List[str]:
    """The names in ``text``, in order, repeats kept (see the module docstring). A run opening a sentence loses its
    first word when that word, in lower case, is in ``common_words`` (default a few function words; see
    :func:`lower_case_words`); a one-word run opening a sentence is never a name."""
    common = {w.lower() for w in _OPENERS} if common_words is None else common_words
    names = []
    for match in _NAME.finditer(text):
        name, start = match.group(0).rstrip("'-"), match.start()
        before = text[:start].rstrip()
        opens_sentence = not before or before[-1] in '.!?"\n'
        words = name.split(maxsplit=1)
        if opens_sentence and len(words) == 2 and words[0].lower() in common:
            name = words[1]
        elif opens_sentence and len(words) == 1:
            continue
        if len(name) < 3 or len(name.split()) > MAX_NAME_WORDS:
            continue
        names.append(name)
    return names


def _answer_pattern(answer: str) -> "re.Pattern[str]":
    """The answer as a whole word (case-sensitive when it has a capital letter, else case-insensitive)."""
    flags = 0 if answer != answer.lower() else re.IGNORECASE
    return re.compile(rf"(?<!\w){re.escape(answer)}(?!\w)", flags)


def corpus_candidates(forget: Sequence[Mapping[str, Any]], texts: Sequence[str],
                      per_fact: int = 150) -> List[Dict[str, str]]:
    """Candidate retain records: per fact of ``forget`` (mappings with ``prompt``, ``subject``, ``answer``) with an
    answer and its subject in its prompt, the ``per_fact`` names occurring most often in the ``texts`` that contain
    the answer (ties: first seen first), each put into the fact's template, ``{"prompt", "subject", "answer"}``.
    A name equal to the answer or to a forget subject (case-insensitively) is skipped; a record already made for
    an earlier fact (same prompt and subject) is not repeated. Raises ValueError for ``per_fact < 1``."""
    if per_fact < 1:
        raise ValueError(f"per_fact must be >= 1, got {per_fact}")
    common = lower_case_words(texts)
    names_per_text = [entity_names(text, common) for text in texts]
    subjects = {str(f["subject"]).strip().casefold() for f in forget}
    records: List[Dict[str, str]] = []
    seen: set = set()
    for fact in forget:
        answer = str(fact.get("answer") or "").strip()
        template = fact_template(str(fact["prompt"]), str(fact["subject"]))
        if not answer or template is None:
            continue
        pattern = _answer_pattern(answer)
        counts: Counter = Counter()
        for text, names in zip(texts, names_per_text):
            if pattern.search(text):
                counts.update(names)
        taken = 0
        for name, _ in counts.most_common():
            if taken >= per_fact:
                break
            if name.casefold() in subjects or name.casefold() == answer.casefold():
                continue
            prompt = template.format(name)
            taken += 1
            if (prompt, name) not in seen:
                seen.add((prompt, name))
                records.append({"prompt": prompt, "subject": name, "answer": answer})
    return records
