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

Answers given as lists use their first entry.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Union

from zerounlearn_editor.data.records import RecordReader, cases_from_records, fact_case, make_probe
from zerounlearn_editor.data.types import UnlearnCase


def load_zsre_mend(path: Union[str, Path], source: str = "zsre") -> List[UnlearnCase]:
    """Load ZsRE in ROME/MEND format (see module docstring for the field mapping)."""

    def build(reader: RecordReader) -> Optional[UnlearnCase]:
        subject = reader.text("subject").strip()
        forget = make_probe(reader.text("src"), reader.answer("answers"))
        if subject not in forget.prompt:
            return None
        paraphrase = make_probe(reader.text("rephrase"), forget.answer)
        neighbour = make_probe(reader.text("loc"), reader.answer("loc_ans"))
        return fact_case(str(reader.index), subject, forget, [paraphrase], [neighbour], source)

    return cases_from_records(path, build)


def load_zsre_knowedit(path: Union[str, Path], source: str = "zsre-knowedit") -> List[UnlearnCase]:
    """Load ZsRE in KnowEdit format (see module docstring for the field mapping)."""

    def build(reader: RecordReader) -> Optional[UnlearnCase]:
        subject = reader.text("subject").strip()
        forget = make_probe(reader.text("prompt"), reader.answer("ground_truth"))
        if subject not in forget.prompt:
            return None
        has_paraphrase = reader.has("rephrase_prompt")
        paraphrase = [make_probe(reader.text("rephrase_prompt"), forget.answer)] if has_paraphrase else []
        neighbour = [
            make_probe(item.text("prompt"), item.answer("ground_truth"))
            for group in (reader.mapping("locality") if reader.has("locality") else {})
            for item in reader.object_list(f"locality.{group}")
        ]
        return fact_case(str(reader.index), subject, forget, paraphrase, neighbour, source)

    return cases_from_records(path, build)
