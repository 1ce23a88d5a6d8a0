"""Issue 48 lever: retain sets read from the package's own statistics corpus (``wiki_passages_3643``), no CounterFact
prompt in them, so that a `--many` YAML could carry the lever without a user's retain file.

Each retain request is a named entity of a corpus sentence: a run of 1-4 capitalised words that does not open the
sentence (a possessive's ending dropped, none opening with a preposition or article). Two kinds are written,
``SIZE`` entities each (distinct entity strings, drawn with ``SEED``):
- ``bare``: the entity alone as the prompt (``{"prompt": "Green Bay Packers", "subject": "Green Bay Packers"}``), the
  way CounterFact prompts open with their subject;
- ``sentence``: the sentence up to and including the entity (the key is read at the entity's last token, so the text
  after it would not change the key).
Passages from index ``FIRST_PASSAGE`` on only (the statistics read the first ``mom2_n_samples`` passages). Entities
equal to a subject of the CounterFact train or val file are dropped (the product form would drop the forget
subjects only; this drops more).

Run from the repository root: python benchmarks/results/gemma/corpus_retain/make_corpus_retain.py [SIZE ...]  (500 run)
"""
from __future__ import annotations

import json
import lzma
import random
import re
import sys
from pathlib import Path
from typing import Dict, List, Tuple

CORPUS = Path("zerounlearn_editor/data/embedded/wiki_passages_3643.jsonl.xz")
DATA = Path("../shared/data/counterfact")
HERE = Path(__file__).resolve().parent
SEED, FIRST_PASSAGE = 7, 1000
ENTITY = re.compile(r"(?<![\w'])[A-Z][a-z][\w'-]*(?: [A-Z][\w'-]+){0,3}")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"])")
OPENERS = {"On", "In", "At", "The", "A", "An", "After", "Before", "During", "From", "By", "For", "With", "His", "Her"}


def entities(text: str) -> List[Tuple[str, str]]:
    """``(entity, sentence up to the entity's end)`` for every entity that does not open its sentence."""
    found = []
    for sentence in SENTENCE_END.split(text):
        for match in ENTITY.finditer(sentence):
            entity = re.sub(r"'s?$", "", match.group(0))
            end = match.start() + len(entity)
            if match.start() < 3 or entity.split()[0] in OPENERS or len(sentence[:end].split()) > 30:
                continue
            found.append((entity, sentence[:end]))
    return found


def main(sizes: List[int]) -> None:
    with lzma.open(CORPUS, "rt", encoding="utf-8") as handle:
        passages = [json.loads(line)["text"] for line in handle]
    subjects = {r["subject"] for name in ("counterfact_easyedit_train_9484.json", "counterfact_easyedit_val_1919.json")
                for r in json.loads((DATA / name).read_text(encoding="utf-8"))}
    by_entity: Dict[str, str] = {}
    for text in passages[FIRST_PASSAGE:]:
        for entity, sentence in entities(text):
            if entity not in subjects:
                by_entity.setdefault(entity, sentence)
    order = random.Random(SEED).sample(sorted(by_entity), len(by_entity))
    for size in sizes:
        chosen = order[:size]
        bare = [{"prompt": e, "subject": e} for e in chosen]
        sentence = [{"prompt": by_entity[e], "subject": e} for e in chosen]
        for kind, records in (("bare", bare), ("sentence", sentence)):
            out = HERE / f"retain_corpus_{kind}{size}.json"
            out.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{size} entities of {len(by_entity)} distinct (passages {FIRST_PASSAGE}-{len(passages) - 1})")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [500])
