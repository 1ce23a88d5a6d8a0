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
Festival``, ``Congress of Vienna``; any script's capitals, ``\u00c9mile Zola``), joined by at most one lower-case
particle (of, de, von, ...), at most :data:`MAX_NAME_WORDS` words (an abbreviation such as ``U.S.`` is one word). A
name ends at punctuation, a possessive (``Trump's`` -> ``Trump``), a sentence's end or a line break. A run opening a
sentence loses a first word the text writes in lower case more often than capitalised inside a sentence (``In Paris``
-> ``Paris``, ``Then Tom`` -> ``Tom``, but ``New York`` stays), and a single capitalised word opening a sentence is
not a name. A word starting in lower case (``iPhone``, ``anti-French``) is never part of one.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

__all__ = ["MAX_NAME_WORDS", "fact_template", "ordinary_words", "entity_names", "corpus_candidates"]

MAX_NAME_WORDS = 5
"""Longest name, in words, taken from the text."""

_OPENERS = frozenset("a an and as at but by during for from his her in its of on their the this that these those to "
                     "when while with after before".split())
"""Words :func:`entity_names` cuts from the front of a run that opens a sentence when it is given no vocabulary."""
_PARTICLES = frozenset("of de du da la le von van der".split())
"""Lower-case words a name may hold between two capitalised words (``Congress of Vienna``)."""
_ABBREVIATION = re.compile(r"(?:[^\W\d_]\.){2,}")
_OPEN_PUNCT = "\"'([{\u201c\u2018"
_CLOSE_PUNCT = ",;:)]}\"'\u201d\u2019"
_SENTENCE_END = ".!?"
_GLUED_SENTENCE = re.compile(r"(?<=[a-z]{2})\.(?=[A-Z])")
_POSSESSIVES = ("'s", "\u2019s")


def fact_template(prompt: str, subject: str) -> Optional[str]:
    """``prompt`` with the first occurrence of ``subject`` replaced by ``{}`` (literal braces of the prompt
    doubled, so ``template.format(name)`` rebuilds it), or ``None`` when the subject is empty or absent."""
    if not subject or subject not in prompt:
        return None
    head, tail = prompt.split(subject, 1)
    return head.replace("{", "{{").replace("}", "}}") + "{}" + tail.replace("{", "{{").replace("}", "}}")


@dataclass(frozen=True)
class _Word:
    """One whitespace-separated word of a text: ``core`` without surrounding punctuation (a possessive ``'s`` cut),
    whether it opens a sentence, and whether a name must end after it (punctuation, a possessive, a sentence end)."""

    core: str
    opens_sentence: bool
    ends_run: bool

    @property
    def capitalised(self) -> bool:
        return bool(self.core) and self.core[0].isupper()


def _words(text: str) -> List[_Word]:
    """The words of ``text`` in order (see :class:`_Word`); a line break opens a sentence and ends a name, and so does
    a full stop with no space after it between a lower-case word and a capital (``Brussels.In``)."""
    text = _GLUED_SENTENCE.sub(". ", text)
    words: List[_Word] = []
    opens, last_end = True, 0
    for match in re.finditer(r"\S+", text):
        if "\n" in text[last_end:match.start()]:
            opens = True
            if words:
                words[-1] = _Word(words[-1].core, words[-1].opens_sentence, True)
        last_end = match.end()
        raw = match.group(0).lstrip(_OPEN_PUNCT)
        if _ABBREVIATION.fullmatch(raw.rstrip(_CLOSE_PUNCT)):
            core, ends, closes = raw.rstrip(_CLOSE_PUNCT), raw != raw.rstrip(_CLOSE_PUNCT), False
        else:
            stripped = raw.rstrip(_CLOSE_PUNCT + _SENTENCE_END)
            closes = any(c in _SENTENCE_END for c in raw[len(stripped):])
            core, ends = stripped, closes or stripped != raw
        if core.endswith(_POSSESSIVES):
            core, ends = core[:-2], True
        words.append(_Word(core, opens, ends))
        opens = closes
    return words


def ordinary_words(texts: Sequence[str]) -> FrozenSet[str]:
    """Words (lower-cased) that ``texts`` write in lower case more often than capitalised inside a sentence: such a
    word opening a sentence is not part of a name (``Then``, ``However``; ``New`` of ``New York`` is not one)."""
    lower: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    for text in texts:
        for word in _words(text):
            if word.core[:1].islower():
                lower[word.core] += 1
            elif word.capitalised and not word.opens_sentence:
                inside[word.core.lower()] += 1
    return frozenset(w for w, n in lower.items() if n > inside[w])


def _runs(words: Sequence[_Word]) -> List[List[_Word]]:
    """Maximal runs of capitalised words, one particle allowed between two of them; a run ends after a word that
    ends one (:class:`_Word`)."""
    runs: List[List[_Word]] = []
    run: List[_Word] = []
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else None
        joins = (bool(run) and word.core in _PARTICLES and run[-1].core not in _PARTICLES and not word.ends_run
                 and following is not None and following.capitalised and not following.opens_sentence)
        if word.capitalised or joins:
            run.append(word)
        elif run:
            runs.append(run)
            run = []
        if run and run[-1].ends_run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs


def entity_names(text: str, ordinary: Optional[FrozenSet[str]] = None) -> List[str]:
    """The names in ``text``, in order, repeats kept (see the module docstring). A run opening a sentence loses a
    first word in ``ordinary`` (default a few function words; see :func:`ordinary_words`) and any particle after it;
    a one-word run opening a sentence is never a name."""
    cut = _OPENERS if ordinary is None else ordinary
    names: List[str] = []
    for run in _runs(_words(text)):
        if run[0].opens_sentence:
            if len(run) == 1:
                continue
            if run[0].core.lower() in cut:
                run = run[1:]
                while run and run[0].core in _PARTICLES:
                    run = run[1:]
        name = " ".join(word.core for word in run)
        if len(name) < 3 or len(run) > MAX_NAME_WORDS:
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
    A name equal to the answer or to a forget subject (case-insensitively) is skipped, and so is a record already
    made for an earlier fact (same prompt and subject); neither counts against ``per_fact``. A name holding the
    answer (``BMW M5`` for ``BMW``) is kept: CounterFact's neighbours are often such names. Raises ValueError for
    ``per_fact < 1``."""
    if per_fact < 1:
        raise ValueError(f"per_fact must be >= 1, got {per_fact}")
    ordinary = ordinary_words(texts)
    names_per_text = [entity_names(text, ordinary) for text in texts]
    subjects = {str(f["subject"]).strip().casefold() for f in forget}
    records: List[Dict[str, str]] = []
    seen: Set[Tuple[str, str]] = set()
    for fact in forget:
        answer = str(fact.get("answer") or "").strip()
        template = fact_template(str(fact["prompt"]), str(fact["subject"]))
        if not answer or template is None:
            continue
        pattern = _answer_pattern(answer)
        counts: Counter[str] = Counter()
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
            if (prompt, name) not in seen:
                seen.add((prompt, name))
                records.append({"prompt": prompt, "subject": name, "answer": answer})
                taken += 1
    return records
