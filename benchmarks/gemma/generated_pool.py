"""Issue 48: the pool the model writes itself (``zerounlearn_editor.applications.generated_pool``), as a file, for
`zerounlearn retain-set --pool` (RESULTS 12.37 ran this script, then `retain-set --pool`; `retain-set --generate`
does both in one command, the same pool and draw for the same --seed).

  python benchmarks/gemma/generated_pool.py FACTS OUT [--samples N] [--new-tokens T] [--seed S]
"""
from __future__ import annotations

import argparse
import logging
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("facts")
    parser.add_argument("out")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from zerounlearn_editor.applications.generated_pool import generate_pool
    from zerounlearn_editor.applications.retain_set import read_facts
    from zerounlearn_editor.support.files import write_json_atomic
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    facts = read_facts(args.facts)
    model, tok = load_model_and_tokenizer("gemma3-270m")
    write_json_atomic(args.out, generate_pool(model, tok, facts, args.samples, args.new_tokens, args.seed))


if __name__ == "__main__":
    main()
