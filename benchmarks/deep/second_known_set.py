"""A second set of known CounterFact facts, disjoint from the 80 cached known cases (both halves, TUNE and REPORT).

The 80 cached known cases (``benchmarks/results/deep/known_counterfact_easyedit.json``) are *all* the cases of the
EasyEdit val file (1,919) that SmolLM2 knows by the bench's criterion (:func:`select_known_cases`: the forget probe,
prompt -> ground_truth, reaches mean token accuracy 1.0, scored at batch size 64), so no further known fact is left
in that file. The second set comes from the EasyEdit *train* file (9,484 cases, disjoint from the val file, same
format, so the same criterion applies unchanged): its cases in an order shuffled with ``random.Random(seed)``, minus
those whose subject is the subject of one of the 80 cached cases, are scored by :func:`select_known_cases` until
``n`` are known. It writes ``OUT.json`` (``{"case_ids": [...]}``, sorted by integer id, for ``audit_variants.py
--data <train file> --cases OUT.json``) and ``OUT.meta.json`` (how they were drawn).

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=. ZEROUNLEARN_DATA_DIR=../shared/data \\
        python benchmarks/deep/second_known_set.py --out benchmarks/results/audit/report2/known_train_seed1 --seed 1
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import random
from pathlib import Path
from typing import List, Optional, Sequence, Set

from zerounlearn_editor.data.datasets import default_data_dir, load_cases
from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.evaluation.selection import select_known_cases
from zerounlearn_editor.support.files import write_json_atomic

LOG = logging.getLogger("second_known_set")
TRAIN = "counterfact/counterfact_easyedit_train_9484.json"


def seeded_candidates(cases: Sequence[UnlearnCase], excluded_subjects: Set[str], seed: int) -> List[UnlearnCase]:
    """``cases`` whose subject is not in ``excluded_subjects``, in an order shuffled with ``random.Random(seed)``."""
    kept = [c for c in cases if c.request["subject"] not in excluded_subjects]
    random.Random(f"{seed}:second-known").shuffle(kept)
    return kept


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="writes OUT.json and OUT.meta.json")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--data", default=None, help=f"the candidate file (default: DATA_DIR/{TRAIN})")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--known-cache", default="benchmarks/results/deep/known_counterfact_easyedit.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    data = Path(args.data) if args.data else default_data_dir() / TRAIN
    cases = load_cases(data, format="counterfact-easyedit")
    val = {c.case_id: c for c in load_cases("counterfact-easyedit")}
    cached = json.loads(Path(args.known_cache).read_text(encoding="utf-8"))["known"]
    excluded = {val[i].request["subject"] for i in cached}
    overlap = {c.case_id for c in cases} & set(val)
    if overlap:
        raise ValueError(f"{data}: {len(overlap)} case ids are also val case ids")
    candidates = seeded_candidates(cases, excluded, args.seed)
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(args.model)
    known = select_known_cases(model, tok, candidates, args.n, min_accuracy=1.0, batch_size=64)
    scanned = candidates.index(known[-1]) + 1
    ids = sorted((c.case_id for c in known), key=int)
    write_json_atomic(Path(f"{args.out}.json"), {"case_ids": ids})
    meta = {
        "what": "known CounterFact facts disjoint from the 80 cached known val cases (TUNE and REPORT halves)",
        "criterion": "select_known_cases: the forget probe (prompt -> ground_truth) reaches mean token accuracy 1.0 "
                     "(every answer token the greedy next token), batch size 64 (the criterion of the cached 80)",
        "data": str(data), "model": args.model, "seed": args.seed, "n": len(ids),
        "order": f"random.Random('{args.seed}:second-known').shuffle of the file's cases minus excluded subjects",
        "n_cases": len(cases), "n_excluded_by_subject": len(cases) - len(candidates),
        "n_scanned_to_find_n": scanned, "excluded_subjects": sorted(excluded),
        "known_cache": args.known_cache,
        "relation_mix": dict(collections.Counter(c.relation for c in known).most_common()),
    }
    write_json_atomic(Path(f"{args.out}.meta.json"), meta)
    LOG.info("second known set: %d known of the first %d of %d candidates", len(ids), scanned, len(candidates))


if __name__ == "__main__":
    main()
