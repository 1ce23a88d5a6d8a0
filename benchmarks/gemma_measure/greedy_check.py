"""Greedy decoding of a facts file on a model folder, beside what a ledger beside it records.

For each fact: the prompt tokenised as the tokenizer does by default (Gemma's adds BOS), and, to show what BOS
does, without special tokens; ``max_new_tokens`` greedy tokens, one prompt at a time (no padding); whether the
continuation starts with the answer (after stripping spaces); and, with ``--ledger``, the ledger's ``answered`` and
``status`` for the fact. ``--fail-on-mismatch`` exits 1 when a ledger record says ``forgotten`` (or
``answered: false``) for a fact whose BOS-prefixed greedy continuation starts with its answer, or the reverse.

    python benchmarks/gemma_measure/greedy_check.py --model DIR --facts facts.json [--ledger] --out check.json
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from zerounlearn_editor.applications.ledger import LEDGER_NAME
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("greedy_check")


def greedy(model, tok, ids: List[int], new_tokens: int) -> str:
    """The greedy continuation of ``ids`` (one row, no padding), special tokens kept."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=new_tokens, do_sample=False, num_beams=1,
                             pad_token_id=tok.pad_token_id or tok.eos_token_id)
    return tok.decode(out[0, len(ids):].tolist())


def starts_with_answer(text: str, answer: str) -> bool:
    return text.strip().lower().startswith(answer.strip().lower())


def check(model_dir: str, facts: List[Dict[str, Any]], ledger: Optional[Dict[str, Any]], new_tokens: int):
    model, tok = load_model_and_tokenizer(model_dir, "cpu")
    records = {(r["prompt"], r["subject"]): r for r in (ledger or {}).get("facts", [])}
    rows, mismatches = [], 0
    for fact in facts:
        with_bos = greedy(model, tok, tok(fact["prompt"])["input_ids"], new_tokens)
        no_bos = greedy(model, tok, tok(fact["prompt"], add_special_tokens=False)["input_ids"], new_tokens)
        row = {"prompt": fact["prompt"], "answer": fact["answer"], "greedy_bos": with_bos, "greedy_no_bos": no_bos,
               "answered_bos": starts_with_answer(with_bos, fact["answer"]),
               "answered_no_bos": starts_with_answer(no_bos, fact["answer"])}
        record = records.get((fact["prompt"], fact["subject"]))
        if record is not None:
            row.update(ledger_answered=record.get("answered"), ledger_status=record.get("status"))
            if record.get("answered") is not None and record["answered"] != row["answered_bos"]:
                mismatches += 1
            if record.get("status") == "forgotten" and row["answered_bos"]:
                mismatches += 1
        rows.append(row)
        LOG.info("%s -> %r (no BOS %r) ledger %s", fact["prompt"], with_bos, no_bos, row.get("ledger_status"))
    return rows, mismatches, tok.decode(tok("x")["input_ids"][:1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--facts", required=True)
    parser.add_argument("--ledger", action="store_true", help="read <model>/" + LEDGER_NAME)
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--fail-on-mismatch", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    facts = json.loads(Path(args.facts).read_text())
    ledger = json.loads((Path(args.model) / LEDGER_NAME).read_text()) if args.ledger else None
    rows, mismatches, first = check(args.model, facts, ledger, args.new_tokens)
    write_json_atomic(Path(args.out), {"model": args.model, "facts": args.facts, "first_token_of_prompts": first,
                                      "answered_bos": sum(r["answered_bos"] for r in rows),
                                      "answered_no_bos": sum(r["answered_no_bos"] for r in rows),
                                      "ledger_mismatches": mismatches, "rows": rows})
    LOG.info("answered with BOS %d, without %d, of %d; ledger mismatches %d", sum(r["answered_bos"] for r in rows),
             sum(r["answered_no_bos"] for r in rows), len(rows), mismatches)
    if args.fail_on_mismatch and mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()
