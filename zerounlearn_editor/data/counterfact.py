"""CounterFact loaders: the ROME/MEMIT record format and the EasyEdit/MEND format.

ROME format (``counterfact_rome_*.json``), per record:
    forget      ``requested_rewrite.prompt.format(subject)`` -> ``target_true.str``
    paraphrase  each of ``paraphrase_prompts``             -> ``target_true.str``
    neighbour   each of ``neighborhood_prompts``           -> ``target_true.str``
    (neighbourhood prompts are about other subjects sharing the true object, so they must
    keep that answer.)

EasyEdit format (``counterfact_easyedit_*.json``), per record:
    forget      ``prompt``          -> ``ground_truth``
    paraphrase  ``rephrase_prompt`` -> ``ground_truth``
    neighbour   ``locality_prompt`` -> ``locality_ground_truth``
    (this format has no relation id: a case's ``relation`` is its prompt template, the prompt
    with the subject replaced by ``{}``, e.g. ``"{}, by"``.)

Records whose subject does not occur verbatim in the forget prompt cannot form a request;
they are skipped and counted in the log (none in the shipped files).
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
from zerounlearn_editor.data.types import UnlearnCase

__all__ = ["load_counterfact_rome", "load_counterfact_easyedit"]

_SKIP_REASON = "subject not verbatim in prompt"


def load_counterfact_rome(path: Union[str, Path], source: str = "counterfact") -> List[UnlearnCase]:
    """Load CounterFact in ROME/MEMIT format (see module docstring for the field mapping)."""
    records = read_json_records(path)
    cases: List[UnlearnCase] = []
    skipped = 0
    for index, record in enumerate(records):
        reader = RecordReader(path, index, record)
        template = reader.text("requested_rewrite.prompt")
        subject = reader.text("requested_rewrite.subject").strip()
        answer = reader.text("requested_rewrite.target_true.str")
        if "{}" not in template:
            raise reader.error("requested_rewrite.prompt", "expected a '{}' placeholder for the subject")
        prompt = template.replace("{}", subject)
        if subject not in prompt:
            skipped += 1
            continue
        forget = make_probe(prompt, answer)
        cases.append(
            UnlearnCase(
                case_id=str(reader.raw("case_id")),
                request=make_request(forget.prompt, subject, forget.answer),
                forget=[forget],
                paraphrase=[make_probe(p, answer) for p in reader.text_list("paraphrase_prompts")],
                neighbour=[make_probe(p, answer) for p in reader.text_list("neighborhood_prompts")],
                source=source,
                relation=str(reader.raw("requested_rewrite.relation_id")) if reader.has("requested_rewrite.relation_id") else None,
            )
        )
    log_skipped(path, skipped, len(records), _SKIP_REASON)
    return cases


def load_counterfact_easyedit(
    path: Union[str, Path], source: str = "counterfact-easyedit"
) -> List[UnlearnCase]:
    """Load CounterFact in EasyEdit/MEND format (see module docstring for the field mapping)."""
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
        case_id = str(reader.raw("case_id")) if reader.has("case_id") else str(index)
        cases.append(
            UnlearnCase(
                case_id=case_id,
                request=make_request(forget.prompt, subject, forget.answer),
                forget=[forget],
                paraphrase=[make_probe(reader.text("rephrase_prompt"), forget.answer)],
                neighbour=[
                    make_probe(reader.text("locality_prompt"), reader.answer("locality_ground_truth"))
                ],
                source=source,
                relation=forget.prompt.replace(subject, "{}", 1),
            )
        )
    log_skipped(path, skipped, len(records), _SKIP_REASON)
    return cases
