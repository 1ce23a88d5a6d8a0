"""Write the records of a CounterFact EasyEdit-format file that a model knows, in file order.

The bench's ``--known-only`` scores every record of ``--data-path`` before it samples a seed (1,919 val records:
about 28 minutes for Gemma-3-270m on a loaded 2-core CPU). This script scores them once with the same function
(``select_known_cases``, forget-prompt token accuracy 1.0) and writes the known records, unchanged and in order, so
that ``bench --data-path <this file> --known-only --n N --seeds S`` draws the same cases as the full file would
(``sample_cases`` samples the known list, which is the same list in the same order) after re-scoring only these.

    python benchmarks/gemma_measure/known_file.py --model gemma3-270m \
        --data $ZEROUNLEARN_DATA_DIR/counterfact/counterfact_easyedit_val_1919.json --out known.json

``--start A --stop B`` scores only records A..B-1 (file order; a long file in parts, one process each);
``--merge OUT PART...`` writes the parts' known records, concatenated in the order given, to OUT (no model).
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import List

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("known_file")


def merge_parts(out: str, parts: List[str]) -> None:
    """Concatenate the known records of ``parts`` (files this script wrote), in the order given, into ``out``."""
    merged: list = []
    for part in parts:
        merged.extend(json.loads(Path(part).read_text(encoding="utf-8")))
    write_json_atomic(Path(out), merged)
    LOG.info("%d known records from %d parts -> %s", len(merged), len(parts), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model name or folder (as the bench's model_name)")
    parser.add_argument("--data", help="a counterfact-easyedit JSON file")
    parser.add_argument("--out")
    parser.add_argument("--start", type=int, default=0, help="first record to score (file order; default 0)")
    parser.add_argument("--stop", type=int, default=None, help="record to stop before (default: the end)")
    parser.add_argument("--merge", nargs="+", metavar="FILE", help="OUT PART...: concatenate parts, no scoring")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.merge:
        merge_parts(args.merge[0], args.merge[1:])
        return
    if not (args.model and args.data and args.out):
        parser.error("--model, --data and --out are required unless --merge is given")
    records = json.loads(Path(args.data).read_text())[args.start:args.stop]
    in_slice = {str(r["case_id"]) for r in records}
    cases = [c for c in load_cases("counterfact-easyedit", path=args.data) if str(c.case_id) in in_slice]
    model, tok = load_model_and_tokenizer(args.model, "cpu")
    started = time.perf_counter()
    known = select_known_cases(model, tok, cases, None, min_accuracy=1.0)
    seconds = time.perf_counter() - started
    ids = {str(case.case_id) for case in known}
    chosen = [r for r in records if str(r["case_id"]) in ids]
    LOG.info("%d of %d records known (%.0f s scoring)", len(chosen), len(records), seconds)
    write_json_atomic(Path(args.out), chosen)
    write_json_atomic(Path(args.out).with_suffix(".meta.json"), {
        "model": args.model, "data": args.data, "start": args.start, "stop": args.stop, "known": len(chosen),
        "records": len(records),
        "scoring_seconds": round(seconds, 1), "min_accuracy": 1.0})


if __name__ == "__main__":
    main()
