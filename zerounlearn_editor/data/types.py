"""Plain data types shared by all dataset loaders.

Answer spacing convention
-------------------------
A :class:`Probe` stores its ``answer`` **without** a leading space (``"Paris"``, not
``" Paris"``). Everything that scores a probe joins the two as ``prompt + " " + answer``
(see :mod:`zerounlearn_editor.evaluation.metrics`), exactly as EasyEdit and ROME do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Union


@dataclass(frozen=True)
class Probe:
    """One teacher-forced probe: the model reads ``prompt`` and should (or should not) say ``answer``.

    ``answer`` carries no leading space; scorers evaluate the text ``prompt + " " + answer``.
    """

    prompt: str
    answer: str


@dataclass
class UnlearnCase:
    """One unlearning request together with its evaluation probes.

    Attributes:
        case_id: identifier, unique within one dataset.
        request: EasyEdit request dict ``{"prompt", "subject", "ground_truth", "target_new"}``;
            ``subject`` occurs verbatim in ``prompt``; ``target_new`` is ``""`` (the method's
            YAML decides the neutral target).
        forget: probes whose true answer must be forgotten (efficacy).
        paraphrase: other phrasings of the forgotten knowledge (generalization).
        neighbour: probes whose answers must be kept (specificity / locality).
        source: name of the dataset format the case came from (e.g. ``"counterfact"``).
        probe_groups: optional finer split of the probes by the dataset's own categories
            (e.g. RWKU levels); empty for datasets without such a split.
        relation: which relation the forgotten fact belongs to, when the dataset tells (ROME
            CounterFact: ``relation_id``; EasyEdit CounterFact: the prompt template with the
            subject replaced by ``{}``); ``None`` otherwise. Same-relation cases are siblings.
    """

    case_id: str
    request: Dict[str, str]
    forget: List[Probe]
    paraphrase: List[Probe]
    neighbour: List[Probe]
    source: str
    probe_groups: Dict[str, List[Probe]] = field(default_factory=dict)
    relation: Optional[str] = None


def record_location(path: Union[str, Path], index: Optional[int] = None, field_name: Optional[str] = None) -> str:
    """``"<path>: record <index>: field '<name>'"`` (the parts that are known): where a bad record is."""
    where = str(path)
    if index is not None:
        where += f": record {index}"
    if field_name is not None:
        where += f": field '{field_name}'"
    return where


class DataFormatError(ValueError):
    """A data file does not follow its expected format (the message names file, record index and field)."""

    def __init__(
        self, path: Union[str, Path], message: str, index: Optional[int] = None, field_name: Optional[str] = None
    ) -> None:
        self.path, self.index, self.field_name = str(path), index, field_name
        super().__init__(f"{record_location(path, index, field_name)}: {message}")
