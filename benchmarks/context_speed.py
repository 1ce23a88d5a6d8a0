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

from zerounlearn_editor.engine.contexts import clear_context_prefixes, context_prefixes

_STARTERS = ("The", "Therefore", "Because", "I", "You", "In", "When", "It", "However", "This")


@torch.no_grad()
def _old_continuation(model, tok, starter: str, length: int, generator: torch.Generator) -> str:
    """The sampler before issue 48 (kept here as the timing reference; the tests keep their own copy)."""
    ids = list(tok(starter)["input_ids"])
    special = {t for t in (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) if t is not None}
    for _ in range(length):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float().cpu()
        for token in special:
            logits[token] = -float("inf")
        top = torch.topk(logits, k=5)
        probs = torch.softmax(top.values, dim=-1)
        choice = torch.multinomial(probs, 1, generator=generator).item()
        ids.append(int(top.indices[choice]))
    return tok.decode(ids, skip_special_tokens=True)


def old_prefixes(model, tok, count: int, length: int, seed: int = 0) -> List[str]:
    generator = torch.Generator().manual_seed(seed)
    out = [""]
    for i in range(count):
        text = _old_continuation(model, tok, _STARTERS[i % len(_STARTERS)], length, generator)
        out.append(" ".join(text.replace("{", " ").replace("}", " ").split()) + ". ")
    return out


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
