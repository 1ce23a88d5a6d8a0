"""Time the context-prefix sampler before and after issue 48 (full forward of the whole sequence per token with
full-vocabulary logits at every position, against the KV-cached sampler with last-position logits), in one
process on one thread, and check both draw the same prefixes.

    python benchmarks/context_speed.py --model ~/.cache/zerounlearn_editor/models/gemma-3-270m \\
        --settings 5x10,2x5 --repeats 2 --out out.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import List

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from zerounlearn_editor.engine.contexts import clear_context_prefixes, context_prefixes, sample_prefixes


def old_prefixes(model, tok, count: int, length: int, seed: int = 0) -> List[str]:
    """The sampler before issue 48 (a full forward per token), the timing reference."""
    return sample_prefixes(model, tok, count, length, seed, cached=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--settings", default="5x10,2x5", help="COUNTxLENGTH,...")
    parser.add_argument("--repeats", type=int, default=2, help="old/new alternations per setting")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    path = os.path.expanduser(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = []
    for setting in args.settings.split(","):
        count, length = (int(x) for x in setting.split("x"))
        for repeat in range(args.repeats):
            start = time.perf_counter()
            before = old_prefixes(model, tok, count, length)
            old_s = time.perf_counter() - start
            clear_context_prefixes(model)
            start = time.perf_counter()
            after = context_prefixes(model, tok, count, length, 0)
            new_s = time.perf_counter() - start
            row = dict(count=count, length=length, repeat=repeat, old_s=old_s, new_s=new_s, ratio=old_s / new_s,
                       same=before == after)
            logging.info("%s", row)
            rows.append(row)
    result = dict(model=args.model, vocab=len(tok), threads=torch.get_num_threads(), torch=torch.__version__,
                  load_avg_at_end=os.getloadavg(), rows=rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
