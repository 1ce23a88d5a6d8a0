"""The unedited model's own top next tokens as ``rank_below_alternatives`` alternatives, against the MC distractors.

A data-free alternative source for the lever would be the ``k`` tokens the unedited model finds most likely at a
fact's answer position (its answer's first token excluded). Before building it, this reads an audit's seed file
(case ids, the plan's ``choice`` options), takes those top tokens at the bare prompt and prints, per ``k``: for how
many facts one of them is the first token of one of the fact's MC distractors (a lever that wins only through such
overlaps tunes to the test), and how many of the top-3 are capitalised words (the kind of token an MC option's first
token is) rather than function words or word pieces (" the", " a", " Sh").

    OMP_NUM_THREADS=1 ZEROUNLEARN_DATA_DIR=../shared/data PYTHONPATH=. python benchmarks/audit/rank_topk_overlap.py \\
        benchmarks/results/audit/lever_tune_n40_m5/audit_seed_1.json --out OUT.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.engine.encoding import target_token_ids
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

KS = (3, 10, 50)


def word_like(text: str) -> bool:
    """A capitalised word of at least 3 characters (``" Spanish"``, not ``" the"``, ``" Sh"`` or ``'"'``)."""
    text = text.strip()
    return len(text) >= 3 and text[0].isupper() and text.isalpha()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seed_file")
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    record = json.loads(Path(args.seed_file).read_text(encoding="utf-8"))
    by_id = {c.case_id: c for c in load_cases(args.data)}
    cases = [by_id[i] for i in record["case_ids"]]
    options = record["plan"]["choice_options"]
    model, tok = load_model_and_tokenizer(args.model)
    forget = normalize_requests([c.request for c in cases])
    hits, words, rows = {k: 0 for k in KS}, 0, []
    for i, request in enumerate(forget):
        ids = tok(request.prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1]
        own = target_token_ids(tok, request.answer)[0]
        top = [t for t in torch.argsort(-logits).tolist()[: max(KS) + 1] if t != own][: max(KS)]
        distractors = {target_token_ids(tok, d)[0] for d in options[i][1:]}
        hit_at = [k for k in KS if distractors & set(top[:k])]
        for k in hit_at:
            hits[k] += 1
        top3 = [tok.decode([t]) for t in top[:3]]
        words += sum(word_like(t) for t in top3)
        rows.append({"case_id": cases[i].case_id, "answer": request.answer, "top3": top3,
                     "distractors": options[i][1:], "distractor_in_top": hit_at})
    summary = {"facts": len(rows), **{f"facts_with_a_distractor_in_top{k}": hits[k] for k in KS},
               "top3_word_like": words, "top3_total": 3 * len(rows)}
    print(json.dumps(summary))
    for row in rows:
        print(f"{row['case_id']}: {row['answer']!r} -> {row['top3']}; MC {row['distractors']} "
              f"(distractor in top {row['distractor_in_top'] or '-'})")
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "facts": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
