"""ZsRE loaders: the ROME/MEND eval format and the KnowEdit format.

ROME/MEND format (``zsre_mend_eval_*.json``), per record:
    forget      ``src``      -> ``answers[0]``
    paraphrase  ``rephrase`` -> ``answers[0]``
    neighbour   ``loc``      -> ``loc_ans``
    ``loc`` keeps its ``"nq question: "`` prefix, as ROME, MEND and EasyEdit evaluate it.

KnowEdit format (``knowedit_zsre_*.json``), per record:
    forget      ``prompt``          -> ``ground_truth[0]``
    paraphrase  ``rephrase_prompt`` -> ``ground_truth[0]`` (when present)
    neighbour   every ``{prompt, ground_truth}`` of every ``locality`` group
                (``Relation_Specificity`` in the shipped file) -> its ``ground_truth[0]``

Answers given as lists use their first entry. Records whose subject does not occur verbatim
in the forget prompt are skipped and counted in the log (none in the shipped files: every
ZsRE question there names its subject).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Union

from zerounlearn_editor.data.records import (
    RecordReader,
    log_skipped,
    make_probe,
    make_request,
    read_json_records,
)
from zerounlearn_editor.data.types import Probe, UnlearnCase

__all__ = ["load_zsre_mend", "load_zsre_knowedit"]

_SKIP_REASON = "subject not verbatim in prompt"


def load_zsre_mend(path: Union[str, Path], source: str = "zsre") -> List[UnlearnCase]:
    """Load ZsRE in ROME/MEND format (see module docstring for the field mapping)."""
    records = read_json_records(path)
    cases: List[UnlearnCase] = []
    skipped = 0
    for index, record in enumerate(records):
        reader = RecordReader(path, index, record)
        subject = reader.text("subject").strip()
        forget = make_probe(reader.text("src"), reader.answer("answers"))
        if subject not in forget.prompt:
            skipped += 1
            continue
        cases.append(
            UnlearnCase(
                case_id=str(index),
                request=make_request(forget.prompt, subject, forget.answer),
                forget=[forget],
                paraphrase=[make_probe(reader.text("rephrase"), forget.answer)],
                neighbour=[make_probe(reader.text("loc"), reader.answer("loc_ans"))],
                source=source,
            )
        )
    log_skipped(path, skipped, len(records), _SKIP_REASON)
    return cases


def load_zsre_knowedit(path: Union[str, Path], source: str = "zsre-knowedit") -> List[UnlearnCase]:
    """Load ZsRE in KnowEdit format (see module docstring for the field mapping)."""
    records = read_json_records(path)
    cases: List[UnlearnCase] = []
    skipped = 0
    for index, record in enumerate(records):
        reader = RecordReader(path, index, record)
        subject = reader.text("subject").strip()
        forget = make_probe(reader.text("prompt"), reader.answer("ground_truth"))
        if subject not in forget.prompt:
            skipped += 1
            continue
        paraphrase = (
            [make_probe(reader.text("rephrase_prompt"), forget.answer)]
            if reader.has("rephrase_prompt")
            else []
        )
        cases.append(
            UnlearnCase(
                case_id=str(index),
                request=make_request(forget.prompt, subject, forget.answer),
                forget=[forget],
                paraphrase=paraphrase,
                neighbour=_locality_probes(reader),
                source=source,
            )
        )
    log_skipped(path, skipped, len(records), _SKIP_REASON)
    return cases


def _locality_probes(reader: RecordReader) -> List[Probe]:
    """All ``locality.<group>[i].{prompt, ground_truth}`` entries of a KnowEdit record."""
    if not reader.has("locality"):
        return []
    probes: List[Probe] = []
    for group in reader.mapping("locality"):
        for item in reader.object_list(f"locality.{group}"):
            probes.append(make_probe(item.text("prompt"), item.answer("ground_truth")))
    return probes
