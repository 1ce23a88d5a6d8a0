"""MQuAKE loader: multi-hop cases decomposed into single-hop facts to forget.

Each MQuAKE case is a chain of single-hop facts ``single_hops[i]`` = ``{question, cloze, answer}``.
Every hop becomes one :class:`UnlearnCase`:

    forget      ``cloze``    -> ``answer``   (e.g. "Hey Jude was performed by"; the request uses it)
    paraphrase  ``question`` -> ``answer``   (e.g. "Who performed Hey Jude?")
    neighbour   the cloze probes of the other hops of the same chain(s)

Subject of hop ``i``: ``orig.triples_labeled[i][0]`` (the *original* chain, which ``single_hops``
describe), else the first ``requested_rewrite`` subject in the cloze; it must occur verbatim in the cloze
and the question, or the hop is skipped (counted in the log). A hop shared by several chains is one case
(the first id, ``"<case_id>:hop<i>"``), its neighbours the other hops of all those chains, no repeats.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from zerounlearn_editor.data.records import (
    RecordReader, fact_case, log_skipped, make_probe, read_json_records,
)
from zerounlearn_editor.data.types import Probe, UnlearnCase


@dataclass
class _Hop:
    """One distinct single-hop fact and the neighbours gathered from its chains."""

    case_id: str
    subject: str
    forget: Probe
    paraphrase: Probe
    neighbours: Dict[Probe, None] = field(default_factory=dict)  # ordered set


def load_mquake(path: Union[str, Path], source: str = "mquake") -> List[UnlearnCase]:
    """Load MQuAKE (original schema) as one case per distinct single hop (see module doc)."""
    records = read_json_records(path)
    hops: Dict[Tuple[str, str], _Hop] = {}
    total_hops = 0
    skipped = 0
    for index, record in enumerate(records):
        reader = RecordReader(path, index, record)
        chain: List[Tuple[Tuple[str, str], Probe]] = []
        for position, hop in enumerate(reader.object_list("single_hops")):
            total_hops += 1
            cloze = make_probe(hop.text("cloze"), hop.text("answer"))
            question = make_probe(hop.text("question"), cloze.answer)
            key = (cloze.prompt, cloze.answer)
            chain.append((key, cloze))
            if key in hops:
                continue
            subject = _hop_subject(reader, position, cloze.prompt, question.prompt)
            if subject is None:
                skipped += 1
                continue
            hops[key] = _Hop(f"{reader.raw('case_id')}:hop{position}", subject, cloze, question)
        for key, _ in chain:
            if key not in hops:
                continue
            for other_key, other in chain:
                if other_key != key:
                    hops[key].neighbours[other] = None
    log_skipped(path, skipped, total_hops, "single hops without a subject in cloze and question")
    return [fact_case(hop.case_id, hop.subject, hop.forget, [hop.paraphrase], list(hop.neighbours), source)
            for hop in hops.values()]


def _hop_subject(reader: RecordReader, position: int, cloze: str, question: str) -> Optional[str]:
    """The subject of hop ``position``: original-chain head entity, else a matching rewrite."""
    candidates: List[str] = []
    if reader.has("orig.triples_labeled"):
        triples = reader.raw("orig.triples_labeled")
        if not isinstance(triples, list):
            raise reader.error("orig.triples_labeled", "expected a list of triples")
        if position < len(triples):
            triple = triples[position]
            if not (isinstance(triple, list) and len(triple) == 3 and isinstance(triple[0], str)):
                raise reader.error(
                    f"orig.triples_labeled[{position}]", "expected a [head, relation, tail] triple"
                )
            candidates.append(triple[0].strip())
    if reader.has("requested_rewrite"):
        rewrites = reader.object_list("requested_rewrite")
        candidates.extend(rewrite.text("subject").strip() for rewrite in rewrites)
    for subject in candidates:
        if subject and subject in cloze and subject in question:
            return subject
    return None
