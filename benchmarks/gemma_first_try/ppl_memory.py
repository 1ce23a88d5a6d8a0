"""Peak RSS of one perplexity pass of Gemma-3-270m (4,000 WikiText-2 tokens), with the logits cap or without it.

``python benchmarks/gemma_first_try/ppl_memory.py new|old <wikitext2_raw_test.txt>`` prints one JSON line: the
perplexity, seconds, and the process's peak RSS (MB) after loading and at the end. ``old`` lifts
``LOGITS_BUDGET_BYTES`` so that four 512-token windows share a pass, as before the cap; run each mode in its own
process (peak RSS is per process).
"""
import importlib
import json
import resource
import sys
import time

import torch

from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer


def main() -> None:
    torch.set_num_threads(1)
    module = importlib.import_module("zerounlearn_editor.evaluation.perplexity")
    mode, text_path = sys.argv[1], sys.argv[2]
    if mode == "old":
        module.LOGITS_BUDGET_BYTES = 1 << 40
    model, tok = load_model_and_tokenizer("gemma3-270m")
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    start = time.time()
    ppl = module.perplexity(model, tok, text_path, max_tokens=4000)
    print(json.dumps({"mode": mode, "ppl": ppl, "seconds": round(time.time() - start, 1),
                      "peak_rss_mb_after_load": loaded,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))


if __name__ == "__main__":
    main()
