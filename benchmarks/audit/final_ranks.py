"""Where the answer of each listed fact stands in the unedited model's output: greedy token and answer rank.

For the case ids of a never-known file (``benchmarks/deep/never_known.py``), the request prompts in batches
(:func:`~zerounlearn_editor.harness.forgotten_diagnosis.first_answer_tokens`): the greedy next token, the answer's
first token (as the audit scores it) and its rank among the next-token logits (0 = the greedy token). Splits the
never-known facts into those whose answer is near (rank < 10: the model says something else first, often " the")
and those far from the output, for a floor table per stratum. Writes ``OUT`` (JSON, ``{case_id: {greedy,
answer_first, final_rank}}``).

    ZEROUNLEARN_DATA_DIR=../shared/data PYTHONPATH=. python benchmarks/audit/final_ranks.py \\
        benchmarks/results/audit/never_known/never_known_seed1.json \\
        benchmarks/results/audit/never_known/final_ranks_seed1.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.harness.forgotten_diagnosis import first_answer_tokens
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", help='a never-known file ({"case_ids": [...]})')
    ap.add_argument("out")
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()
    by_id = {c.case_id: c for c in load_cases(args.data)}
    model, tok = load_model_and_tokenizer(args.model)
    ids = json.loads(Path(args.cases).read_text())["case_ids"]
    probes = [Probe(by_id[i].request["prompt"], by_id[i].request["ground_truth"]) for i in ids]
    out = {case_id: {"greedy": tok.decode([t.greedy_id]), "answer_first": tok.decode([t.answer_id]),
                     "final_rank": t.rank}
           for case_id, t in zip(ids, first_answer_tokens(model, tok, probes))}
    write_json_atomic(Path(args.out), out)


if __name__ == "__main__":
    main()
