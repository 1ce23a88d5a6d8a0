"""Issue 48: a pool of facts the model writes itself, for `zerounlearn retain-set --pool` where the user has no pool.

  python benchmarks/gemma/generated_pool.py FACTS OUT [--samples N] [--new-tokens T] [--seed S]

For each fact of FACTS (a facts file, ``{"prompt", "subject", "answer"}``; the prompt contains the subject) the model
reads ``"<prompt> <answer>.\\nOther examples: <subject>,"`` and samples ``N`` continuations of ``T`` tokens (top-k
40, temperature 1): a list of names like the subject. Each name of a continuation's first line (split at commas and
" and "; capitalised, at most 60 characters, no markup, no fact's subject and not part of one) is put in the fact's
prompt in the subject's place with the fact's answer, and kept where the model knows it (the known test of
``retain-set`` and ``bench-scale``: teacher-forced token accuracy >= 0.5 on ``prompt + " " + answer``). OUT is a
facts file ``retain-set --pool`` reads; ``OUT.candidates.json`` holds every candidate before the known test. Nothing
here reads a benchmark file: only the facts and the model.
"""
from __future__ import annotations

import argparse
import logging
import re
from typing import Dict, List, Optional

LOG = logging.getLogger("generated_pool")
TOP_K = 40
MAX_NAME_CHARS = 60
_SPLIT = re.compile(r",| and ")


def list_context(fact: Dict[str, str]) -> str:
    """The text the model continues for one fact: its line, then a list opened by its subject."""
    return f"{fact['prompt']} {fact['answer']}.\nOther examples: {fact['subject']},"


def names_in(continuation: str, facts: List[Dict[str, str]]) -> List[str]:
    """The names of the continuation's first line, in order, that pass the module docstring's filter."""
    names = []
    for part in _SPLIT.split(continuation.split("\n", 1)[0]):
        name = part.strip().rstrip(".;:")
        if (name and (name[0].isupper() or name[0].isdigit()) and len(name) <= MAX_NAME_CHARS
                and "<" not in name and not any(f["subject"] in name or name in f["subject"] for f in facts)):
            names.append(name)
    return names


def sample_candidates(model, tok, fact: Dict[str, str], facts: List[Dict[str, str]], samples: int,
                      new_tokens: int, seed: int) -> List[Dict[str, str]]:
    """The candidate records ``{"prompt", "subject", "answer"}`` of one fact, in the order sampled, no repeats."""
    import torch

    if fact["subject"] not in fact["prompt"]:
        return []
    before, after = fact["prompt"].split(fact["subject"], 1)
    ids = tok(list_context(fact), return_tensors="pt")["input_ids"]  # [1, t]
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(ids.repeat(samples, 1), attention_mask=torch.ones(samples, ids.shape[1], dtype=torch.long),
                             do_sample=True, top_k=TOP_K, temperature=1.0, max_new_tokens=new_tokens,
                             pad_token_id=tok.eos_token_id)  # [samples, t + new]
    seen, records = set(), []
    for row in out[:, ids.shape[1]:]:
        for name in names_in(tok.decode(row, skip_special_tokens=True), facts):
            if name not in seen:
                seen.add(name)
                records.append({"prompt": f"{before}{name}{after}", "subject": name, "answer": fact["answer"]})
    return records


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("facts")
    parser.add_argument("out")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from zerounlearn_editor.applications.retain_set import known_facts_mask, read_facts
    from zerounlearn_editor.support.files import write_json_atomic
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    facts = read_facts(args.facts)
    model, tok = load_model_and_tokenizer("gemma3-270m")
    candidates: List[Dict[str, str]] = []
    seen = set()
    for index, fact in enumerate(facts):
        for record in sample_candidates(model, tok, fact, facts, args.samples, args.new_tokens, args.seed + index):
            if record["prompt"] not in seen:
                seen.add(record["prompt"])
                candidates.append(record)
        if (index + 1) % 10 == 0:
            LOG.info("%d of %d facts: %d candidates", index + 1, len(facts), len(candidates))
    keep = known_facts_mask(model, tok, candidates) if candidates else []
    pool = [record for record, known in zip(candidates, keep) if known]
    served = {r["answer"] for r in pool}
    LOG.info("%d candidates, %d known by the model; %d of %d facts' answers have one", len(candidates), len(pool),
             sum(f["answer"] in served for f in facts), len(facts))
    write_json_atomic(args.out + ".candidates.json", candidates)
    write_json_atomic(args.out, pool)


if __name__ == "__main__":
    main()
