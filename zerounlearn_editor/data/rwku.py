"""RWKU loader: one case per unlearning target (a person), probes grouped by level.

Input: a directory with any of ``forget_level{1,2,3}.json`` and ``neighbor_level{1,2}.json``
(records ``{subject, level, query, type, answer[, neighbor]}``); at least one forget file.

Probes per target (``subject``):
    forget      level 1 (cloze) + level 2 (questions)
    paraphrase  level 3 (adversarial rephrasings: role play, cross-lingual, ...)
    neighbour   neighbour levels 1 (cloze) + 2 (questions), knowledge to keep
    probe_groups  the same probes per file: ``forget_level1`` ... ``neighbor_level2``

Cloze conversion (level 1): a cloze becomes the text *before* its blank (``___``, two or more
underscores), all a causal LM sees there: ``"Stephen King's debut novel, titled ___, established him"``
-> ``("Stephen King's debut novel, titled", "Carrie")``; an opening quote or bracket right before the
blank is dropped. Skipped (counted in the log): several blanks, no text before the blank, a blank glued
to a preceding word or symbol (``"US$___"``: a space would change the text).

Request: the first forget probe (level 1, then level 2, file order) whose prompt contains the
subject verbatim; fallback ``f"{subject} is"`` with the first forget probe's answer.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from zerounlearn_editor.data.records import (
    RecordReader, log_skipped, make_probe, make_request, read_json_records,
)
from zerounlearn_editor.data.types import Probe, UnlearnCase

logger = logging.getLogger(__name__)

RWKU_GROUPS = ("forget_level1", "forget_level2", "forget_level3", "neighbor_level1", "neighbor_level2")
"""Probe groups in the order probes are gathered; group ``g`` is read from ``g.json``."""
_FORGET_GROUPS = ("forget_level1", "forget_level2")
_PARAPHRASE_GROUPS = ("forget_level3",)
_NEIGHBOUR_GROUPS = ("neighbor_level1", "neighbor_level2")
_CLOZE_GROUPS = ("forget_level1", "neighbor_level1")

_BLANK = re.compile(r"_{2,}")
_OPENERS = "'\"‘“(["


def cloze_to_prompt(query: str) -> Optional[str]:
    """The prompt for a cloze query (see module docstring): the query itself without a blank, ``None``
    when it cannot be turned into a left-to-right prompt."""
    blanks = _BLANK.findall(query)
    if not blanks:
        return query
    if len(blanks) > 1:
        return None
    prefix = query[: _BLANK.search(query).start()]
    stripped = prefix.rstrip()
    if stripped and stripped[-1] in _OPENERS and (len(stripped) == 1 or stripped[-2].isspace()):
        stripped = stripped[:-1].rstrip()
    elif stripped == prefix:  # no whitespace between the preceding text and the blank
        return None
    return stripped or None


def load_rwku(path: Union[str, Path], source: str = "rwku") -> List[UnlearnCase]:
    """Load an RWKU directory as one case per target (see module docstring)."""
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"RWKU data directory not found: {directory}")
    groups: Dict[str, Dict[str, List[Probe]]] = {}  # subject -> group -> probes
    present = [group for group in RWKU_GROUPS if (directory / f"{group}.json").is_file()]
    if not any(group.startswith("forget") for group in present):
        raise FileNotFoundError(f"{directory}: no forget_level*.json file")
    for group in RWKU_GROUPS:
        if group not in present:
            logger.warning("%s: %s.json missing; its probes are left out", directory, group)
            continue
        for subject, probe in _read_group(directory / f"{group}.json", group):
            if group.startswith("forget"):
                groups.setdefault(subject, {})
            if subject in groups:
                groups[subject].setdefault(group, []).append(probe)
    return [_build_case(subject, by_group, source) for subject, by_group in groups.items()]


def _read_group(path: Path, group: str) -> List[Tuple[str, Probe]]:
    """(subject, probe) pairs of one RWKU file, clozes converted, unusable clozes skipped."""
    records = read_json_records(path)
    pairs: List[Tuple[str, Probe]] = []
    skipped = 0
    for index, record in enumerate(records):
        reader = RecordReader(path, index, record)
        subject = reader.text("subject").strip()
        query = reader.text("query")
        prompt = cloze_to_prompt(query) if group in _CLOZE_GROUPS else query
        if prompt is None:
            skipped += 1
            continue
        pairs.append((subject, make_probe(prompt, reader.text("answer"))))
    log_skipped(path, skipped, len(records), "cloze blanks that are not a left-to-right continuation")
    return pairs


def _build_case(subject: str, by_group: Dict[str, List[Probe]], source: str) -> UnlearnCase:
    """One case for an RWKU target from its probes per group."""

    def gather(names: Tuple[str, ...]) -> List[Probe]:
        return [probe for name in names for probe in by_group.get(name, [])]

    forget = gather(_FORGET_GROUPS)
    anchor = next((probe for probe in forget if subject in probe.prompt), None)
    if anchor is None:
        anchor = Probe(prompt=f"{subject} is", answer=(forget or gather(_PARAPHRASE_GROUPS))[0].answer)
    return UnlearnCase(
        case_id=subject,
        request=make_request(anchor.prompt, subject, anchor.answer),
        forget=forget,
        paraphrase=gather(_PARAPHRASE_GROUPS),
        neighbour=gather(_NEIGHBOUR_GROUPS),
        source=source,
        probe_groups={name: list(probes) for name, probes in by_group.items()},
    )
