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
    (no relation id: a case's ``relation`` is its prompt with the subject replaced by ``{}``.)
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Union

from zerounlearn_editor.data.records import RecordReader, cases_from_records, fact_case, make_probe
from zerounlearn_editor.data.types import UnlearnCase


def load_counterfact_rome(path: Union[str, Path], source: str = "counterfact") -> List[UnlearnCase]:
    """Load CounterFact in ROME/MEMIT format (see module docstring for the field mapping)."""

    def build(reader: RecordReader) -> UnlearnCase:
        template = reader.text("requested_rewrite.prompt")
        subject = reader.text("requested_rewrite.subject").strip()
        answer = reader.text("requested_rewrite.target_true.str")
        if "{}" not in template:
            raise reader.error("requested_rewrite.prompt", "expected a '{}' placeholder for the subject")
        has_relation = reader.has("requested_rewrite.relation_id")
        relation = reader.raw("requested_rewrite.relation_id") if has_relation else None
        return fact_case(
            str(reader.raw("case_id")), subject, make_probe(template.replace("{}", subject), answer),
            [make_probe(p, answer) for p in reader.text_list("paraphrase_prompts")],
            [make_probe(p, answer) for p in reader.text_list("neighborhood_prompts")],
            source, None if relation is None else str(relation),
        )

    return cases_from_records(path, build)


def load_counterfact_easyedit(path: Union[str, Path],
                              source: str = "counterfact-easyedit") -> List[UnlearnCase]:
    """Load CounterFact in EasyEdit/MEND format (see module docstring for the field mapping)."""

    def build(reader: RecordReader) -> Optional[UnlearnCase]:
        subject = reader.text("subject").strip()
        forget = make_probe(reader.text("prompt"), reader.answer("ground_truth"))
        if subject not in forget.prompt:
            return None
        return fact_case(
            str(reader.raw("case_id")) if reader.has("case_id") else str(reader.index), subject, forget,
            [make_probe(reader.text("rephrase_prompt"), forget.answer)],
            [make_probe(reader.text("locality_prompt"), reader.answer("locality_ground_truth"))],
            source, forget.prompt.replace(subject, "{}", 1),
        )

    return cases_from_records(path, build)
