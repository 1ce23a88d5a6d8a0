"""Plain data types shared by all dataset loaders."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Union


@dataclass(frozen=True)
class Probe:
    """One teacher-forced probe: the model reads ``prompt`` and should (or should not) say ``answer``
    (no leading space, ``"Paris"``; scorers evaluate ``prompt + " " + answer``, as EasyEdit and ROME do)."""

    prompt: str
    answer: str


@dataclass
class UnlearnCase:
    """One unlearning request together with its evaluation probes.

    ``request``: EasyEdit request dict ``{"prompt", "subject", "ground_truth", "target_new"}``, the
    subject verbatim in the prompt, ``target_new`` ``""`` (the method's YAML decides the target).
    ``forget`` / ``paraphrase`` probes must lose their answer, ``neighbour`` probes keep it;
    ``probe_groups``: the dataset's own split of the probes (RWKU levels), if any; ``relation``: the
    forgotten fact's relation when the dataset tells (ROME CounterFact ``relation_id``; EasyEdit
    CounterFact: the prompt with the subject replaced by ``{}``), same-relation cases are siblings.
    """

    case_id: str
    request: Dict[str, str]
    forget: List[Probe]
    paraphrase: List[Probe]
    neighbour: List[Probe]
    source: str
    probe_groups: Dict[str, List[Probe]] = field(default_factory=dict)
    relation: Optional[str] = None


def record_location(path: Union[str, Path], index: Optional[int] = None,
                    field_name: Optional[str] = None) -> str:
    """``"<path>: record <index>: field '<name>'"`` (the parts that are known): where a bad record is."""
    where = str(path)
    if index is not None:
        where += f": record {index}"
    if field_name is not None:
        where += f": field '{field_name}'"
    return where


class DataFormatError(ValueError):
    """A data file does not follow its expected format (the message names file, record index and field)."""

    def __init__(self, path: Union[str, Path], message: str, index: Optional[int] = None,
                 field_name: Optional[str] = None) -> None:
        self.path, self.index, self.field_name = str(path), index, field_name
        super().__init__(f"{record_location(path, index, field_name)}: {message}")
