"""Neighbour probes that a batch edit asks to forget are not neighbours in that batch.

The bench edits a seed's ``n`` cases as one batch. A neighbour probe of case A that is also a
forget or paraphrase probe of another case B of the same batch is knowledge the batch is told
to forget, so scoring it as "kept" (specificity) would charge the method for doing its job.
MQuAKE is built this way (a hop's neighbours are the other hops of its chains, each of them a
case of its own); RWKU has a few (0-12 per seed at n = 50-100), while the CounterFact and
ZsRE files have none at n <= 100 (seeds 1-5), so their tables are unchanged. Such probes are dropped
from A's neighbours (and from A's probe groups, unless A itself asks to forget them) for that
batch only; the count is logged, stored in the seed file and stated in the summary.

:func:`neighbours_naming_forgotten_subjects` marks a second, softer kind, for a diagnostic column
only (``spe_distinct``; ``spe`` keeps scoring them): a neighbour prompt that names a subject the
batch forgets, e.g. "Nintendo DS Lite, created by" when "Nintendo DS" is forgotten. When the prompt
begins with the subject (the CounterFact cases), an edit at the subject's tokens changes exactly the
states such a prompt reads there (the same tokens after the same text), so keeping its answer and
forgetting the named subject's fact conflict for every subject-position editor; elsewhere in a prompt
the states are mostly, not exactly, the same. (The retain draw excludes even more: any record whose
prompt contains a forgotten subject as a plain substring.)
"""
from __future__ import annotations

import dataclasses
import logging
import re
import unicodedata
from typing import Dict, List, Optional, Sequence, Set, Tuple

from zerounlearn_editor.data.types import Probe, UnlearnCase

__all__ = ["drop_batch_forget_neighbours", "neighbours_naming_forgotten_subjects", "names_subject"]

LOG = logging.getLogger(__name__)


def drop_batch_forget_neighbours(cases: Sequence[UnlearnCase]) -> Tuple[List[UnlearnCase], int]:
    """The cases with neighbour probes that other cases of the batch forget removed.

    Args:
        cases: one batch (edited together).

    Returns:
        ``(cases, dropped)``: new case objects where something was removed (the others as
        they are, in the same order) and the number of neighbour probes removed.
    """
    owners: Dict[Probe, Set[int]] = {}
    for index, case in enumerate(cases):
        for probe in (*case.forget, *case.paraphrase):
            owners.setdefault(probe, set()).add(index)
    out: List[UnlearnCase] = []
    dropped = 0
    for index, case in enumerate(cases):
        own = set(case.forget) | set(case.paraphrase)
        forgotten = {p for p in case.neighbour if p not in own and owners.get(p, set()) - {index}}
        if not forgotten:
            out.append(case)
            continue
        neighbour = [p for p in case.neighbour if p not in forgotten]
        dropped += len(case.neighbour) - len(neighbour)
        groups = {
            name: [p for p in probes if p in own or p not in forgotten] for name, probes in case.probe_groups.items()
        }
        out.append(dataclasses.replace(case, neighbour=neighbour, probe_groups=groups))
    if dropped:
        LOG.info("%d neighbour probe(s) are forgotten by another case of the same batch; not scored as neighbours",
                 dropped)
    return out, dropped


def _fold(text: str) -> str:
    """NFKC, runs of whitespace collapsed to one space, casefolded: what subject matching compares."""
    return " ".join(unicodedata.normalize("NFKC", text).split()).casefold()


def _subject_pattern(subjects: Sequence[str]) -> Optional["re.Pattern[str]"]:
    """One pattern matching any of ``subjects`` as whole words in :func:`_fold`-ed text (``None``: no subject).

    The word-boundary checks apply only at a subject edge that is a word character, so "C++" and
    "Mr." are found in "C++ is" / "Mr.X"."""
    parts = []
    for subject in dict.fromkeys(_fold(s) for s in subjects):
        if not subject:
            continue
        left = r"(?<!\w)" if re.match(r"\w", subject[0]) else ""
        right = r"(?!\w)" if re.match(r"\w", subject[-1]) else ""
        parts.append(left + re.escape(subject) + right)
    return re.compile("|".join(parts)) if parts else None


def names_subject(prompt: str, subject: str) -> bool:
    """Whether ``prompt`` contains ``subject`` as whole words (case-insensitive, NFKC, whitespace
    collapsed; "Nintendo DS" is named by "Nintendo DS Lite, created by" but "Ra" is not by "Rabat is")."""
    pattern = _subject_pattern([subject])
    return pattern is not None and pattern.search(_fold(prompt)) is not None


def neighbours_naming_forgotten_subjects(cases: Sequence[UnlearnCase]) -> List[List[bool]]:
    """Per case, per neighbour probe (in order): whether its prompt names a subject the batch forgets.

    Args:
        cases: one batch (edited together); every case's ``request["subject"]`` is forgotten.

    Returns:
        ``[len(cases)][len(case.neighbour)]`` booleans (one compiled pattern for the batch).
    """
    pattern = _subject_pattern([str(c.request.get("subject") or "") for c in cases])
    if pattern is None:
        return [[False] * len(case.neighbour) for case in cases]
    return [[pattern.search(_fold(p.prompt)) is not None for p in case.neighbour] for case in cases]
