"""Issue 48's first try, measured in one process: the facts of a file the model answers (greedy), edited in one
batch with a given YAML; what is still answered, which sibling facts (same relation, other subject) it keeps, the
perplexity change, the edit's seconds per fact and the process's peak RSS.

Perplexity windows are scored one at a time (Gemma's 262,144-token head makes a batch of four 2 GB of logits).
The statistics (``C0``) are computed before the timed edit (their own seconds in the JSON): the edit time is what
an edit with cached statistics costs, as in ``benchmarks/targets_speed.py``.

    python benchmarks/gemma_first_try/first_try.py --model ~/.cache/zerounlearn_editor/models/gemma-3-270m \\
        --hparams gemma-first-try.yaml --facts benchmarks/results/gemma/facts20.json \\
        --siblings benchmarks/results/gemma/siblings20.json --out gemma.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from zerounlearn_editor.applications.unlearn import load_facts
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.pipeline import batched_statistics
from zerounlearn_editor.evaluation.generation import generate_greedy
from zerounlearn_editor.evaluation.metrics import answer_argmax_hits
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, perplexity_of_ids, read_text
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model


def _answered(model, tok, facts):
    return answer_argmax_hits(model, tok, [Probe(f["prompt"], f["ground_truth"]) for f in facts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--hparams", required=True, help="a ZeroUnlearn-GD YAML")
    parser.add_argument("--facts", required=True, help="facts to forget (those the model answers are edited)")
    parser.add_argument("--siblings", required=True, help="facts to keep (those the model answers are scored)")
    parser.add_argument("--ppl-tokens", type=int, default=4000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    model_dir = os.path.expanduser(args.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hp = ZeroUnlearnGDHyperParams.from_hparams(args.hparams).replace(model_name=model_dir)
    facts, siblings = load_facts(args.facts), load_facts(args.siblings)
    known = [f for f, hit in zip(facts, _answered(model, tok, facts)) if hit]
    sib_known = [f for f, hit in zip(siblings, _answered(model, tok, siblings)) if hit]
    ppl_ids = leading_token_ids(tok, read_text(default_ppl_text()), args.ppl_tokens)
    ppl_before = perplexity_of_ids(model, tok, ppl_ids, batch_size=1)
    row = dict(model=args.model, model_type=model.config.model_type, hparams=args.hparams, facts=args.facts,
               n_facts=len(facts), n_known=len(known), siblings=args.siblings, n_siblings_known=len(sib_known),
               threads=torch.get_num_threads(), torch=torch.__version__, layers=list(hp.layers),
               contexts=[hp.context_template_count, hp.context_template_length], v_lr=hp.v_lr,
               mom2_n_samples=hp.mom2_n_samples, ppl_tokens=len(ppl_ids), ppl_before=ppl_before)
    start = time.perf_counter()
    with torch.no_grad():
        batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    row["statistics_s"] = time.perf_counter() - start
    row["edit_start_utc"] = time.strftime("%H:%M:%S", time.gmtime())
    start = time.perf_counter()
    apply_zerounlearn_gd_to_model(model, tok, known, hp)
    row["edit_s"] = time.perf_counter() - start
    row["edit_end_utc"] = time.strftime("%H:%M:%S", time.gmtime())
    row["edit_s_per_fact"] = row["edit_s"] / max(1, len(known))
    still = [f for f, hit in zip(known, _answered(model, tok, known)) if hit]
    kept = [f for f, hit in zip(sib_known, _answered(model, tok, sib_known)) if hit]
    greedy = generate_greedy(model, tok, [f["prompt"] for f in known], 4, 8)
    row.update(ppl_after=perplexity_of_ids(model, tok, ppl_ids, batch_size=1),
               still_answered=[f["prompt"] for f in still], n_still_answered=len(still),
               siblings_kept=len(kept), siblings_lost=[f["prompt"] for f in sib_known if f not in kept],
               greedy_after={f["prompt"]: text for f, text in zip(known, greedy)},
               peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    row["ppl_change_pct"] = 100 * (row["ppl_after"] / row["ppl_before"] - 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in row.items() if k != "greedy_after"}))


if __name__ == "__main__":
    main()
