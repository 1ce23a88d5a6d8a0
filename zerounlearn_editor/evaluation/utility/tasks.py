"""The downstream tasks of the utility evaluation (:data:`TASKS`: sst2, cola, mrpc, rte, nli, mmlu from
``../shared/data/utility/``, schemas in its MANIFEST.md): loading, few-shot prompts, answer words.

Protocol (MEMIT/AlphaEdit-style): a few solved examples (the "shots") precede each query; the
prediction is the choice whose answer word has the highest log-probability after the prompt. GLUE
shots come from the same file, never from the scored items, one per label in turn; MMLU shots are
the dev exemplars of the query's subject.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from zerounlearn_editor.data.records import RecordReader, read_json_records
from zerounlearn_editor.data.types import DataFormatError


@dataclass(frozen=True)
class UtilityItem:
    """One scored query: its full few-shot prompt, the answer words and the gold choice index."""

    prompt: str
    choices: Tuple[str, ...]
    gold: int
    source_index: int


@dataclass(frozen=True)
class TaskSpec:
    """How one task's records become prompts; ``labels``: a record's label -> index of its answer word."""

    name: str
    fields: Tuple[str, ...]
    words: Tuple[str, ...]
    labels: Mapping[Any, int]
    render: Callable[[Mapping[str, Any]], str]


def _single(template: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda r: template.format(**r)


TASKS: Dict[str, TaskSpec] = {
    "sst2": TaskSpec("sst2", ("sentence",), ("negative", "positive"), {0: 0, 1: 1},
                     _single("Review: {sentence}\nSentiment:")),
    "cola": TaskSpec("cola", ("sentence",), ("No", "Yes"), {0: 0, 1: 1},
                     _single("Sentence: {sentence}\nQuestion: Is this sentence grammatically acceptable?\nAnswer:")),
    "mrpc": TaskSpec("mrpc", ("sentence1", "sentence2"), ("No", "Yes"), {0: 0, 1: 1},
                     _single("Sentence 1: {sentence1}\nSentence 2: {sentence2}\n"
                             "Question: Do both sentences mean the same thing?\nAnswer:")),
    "rte": TaskSpec("rte", ("sentence1", "sentence2"), ("True", "False"), {0: 0, 1: 1},
                    _single("{sentence1}\nQuestion: {sentence2} True or False?\nAnswer:")),
    "nli": TaskSpec("nli", ("sentence1", "sentence2"), ("True", "False"),
                    {"entailment": 0, "not_entailment": 1},
                    _single("{sentence1}\nQuestion: {sentence2} True or False?\nAnswer:")),
    "mmlu": TaskSpec("mmlu", ("question", "choices", "subject"), ("A", "B", "C", "D"),
                     {0: 0, 1: 1, 2: 2, 3: 3},
                     lambda r: r["question"].strip() + "\n" + "".join(
                         f"{letter}. {str(choice).strip()}\n" for letter, choice in zip("ABCD", r["choices"])
                     ) + "Answer:"),
}
MMLU_SHOTS_FILE = "mmlu_fewshot_examples.json"


def parse_tasks(spec: Union[str, Sequence[str]]) -> List[str]:
    """``"sst2,mmlu"`` -> ``["sst2", "mmlu"]`` (``"all"`` = every task); unknown names raise."""
    names = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if names == ["all"]:
        return list(TASKS)
    unknown = [n for n in names if n not in TASKS]
    if unknown or not names:
        raise ValueError(f"unknown utility task(s) {unknown or spec!r}; choose from {', '.join(TASKS)}")
    return list(dict.fromkeys(names))


def _read_records(path: Path, spec: TaskSpec) -> List[Dict[str, Any]]:
    """The task file's records, checked (errors name the file, record and field)."""
    if not path.is_file():
        raise DataFormatError(path, f"{spec.name} data file not found")
    records = read_json_records(path)
    label = "answer" if spec.name == "mmlu" else "label"
    for index, record in enumerate(records):
        reader = RecordReader(path, index, record)
        for key in spec.fields:
            reader.raw(key)
        if record.get(label) not in spec.labels:
            raise reader.error(label, f"value {record.get(label)!r}, expected one of {list(spec.labels)}")
        if spec.name == "mmlu" and (not isinstance(record["choices"], list) or len(record["choices"]) != 4):
            raise reader.error("choices", "must be a list of 4 strings")
    return records


def _gold(spec: TaskSpec, record: Mapping[str, Any]) -> int:
    return spec.labels[record["answer" if spec.name == "mmlu" else "label"]]


def _shot_text(spec: TaskSpec, record: Mapping[str, Any]) -> str:
    return f"{spec.render(record)} {spec.words[_gold(spec, record)]}\n\n"


def load_task_items(
    name: str, data_dir: Union[str, Path], n: Optional[int], shots: int, seed: int = 0
) -> List[UtilityItem]:
    """The scored items of task ``name``: ``n`` records drawn with ``seed`` (all when ``None``).

    GLUE: the first ``n`` shuffled records are scored, the ``shots`` demonstrations come from the rest,
    cycling through the labels (0, 1, 0, ...). MMLU: ``shots`` dev exemplars of the query's subject.
    """
    spec = TASKS[name]
    data_dir = Path(data_dir)
    records = _read_records(data_dir / f"{name}.json", spec)
    if shots < 0:
        raise ValueError(f"shots must be >= 0, got {shots}")
    order = list(range(len(records)))
    random.Random(f"{name}:{seed}").shuffle(order)
    scored = order if n is None else order[:n]
    if n is not None and n > len(records):
        raise ValueError(f"{name}: n={n} but {data_dir / f'{name}.json'} holds {len(records)} records")
    if name == "mmlu":
        by_subject: Dict[str, List[Dict[str, Any]]] = {}
        for record in _read_records(data_dir / MMLU_SHOTS_FILE, spec):
            by_subject.setdefault(str(record["subject"]), []).append(record)
        items: List[UtilityItem] = []
        for i in scored:
            record = records[i]
            subject = str(record["subject"])
            header = (
                f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"
            )
            demos = "".join(_shot_text(spec, r) for r in by_subject.get(subject, [])[:shots])
            items.append(UtilityItem(header + demos + spec.render(record), spec.words, _gold(spec, record), i))
        return items
    rest = order[len(scored):] if n is not None else []
    if shots and n is None:
        raise ValueError(f"{name}: few-shot prompts need n (shots come from the records not scored)")
    by_label: Dict[int, List[int]] = {}
    for i in rest:
        by_label.setdefault(_gold(spec, records[i]), []).append(i)
    demos_idx: List[int] = []
    for k in range(shots):
        pool = by_label.get(k % len(spec.words)) or [i for i in rest if i not in demos_idx]
        pick = next((i for i in pool if i not in demos_idx), None)
        if pick is None:
            raise ValueError(f"{name}: not enough unscored records for {shots} shots (n={n})")
        demos_idx.append(pick)
    demos = "".join(_shot_text(spec, records[i]) for i in demos_idx)
    return [UtilityItem(demos + spec.render(records[i]), spec.words, _gold(spec, records[i]), i)
            for i in scored]
