"""Per layer: how much the MLP key at a known answer's first token depends on the subject (issue 37).

An edit keyed at the answer's own token (the retired ``experimental.completion_requests``, at commit 0247767)
removes a multi-token answer's completion (" Toy" -> "ota") only as far as that key tells the forgotten subject
from the other subjects that share the answer (CounterFact's neighbours share relation and answer). For the known
cases of a draw (token accuracy >= 0.5 on the unedited model) with a multi-token answer, the key (the
down-projection's input at the last position) is read at every layer for

* ``prompt + a_1``: the forget prompt followed by the answer's first token;
* ``swapped + a_1``: the same with the subject replaced by another known case's subject;

and, as the reference, at the subject's last token of the prompt cut after the subject, own subject against the
other. Per layer the mean of ``|k - k_swapped| / |k|`` and of the cosine. A layer where the answer-token key
differs between subjects as much as the subject key does would be a place to edit the completion per fact.

Usage (one torch thread; writes JSON and prints a markdown table)::

    OMP_NUM_THREADS=1 python benchmarks/scale/answer_key_subject.py \
        --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json --n 1000 --seed 1 \
        --out benchmarks/results/scale/answer_key_subject_train.json
"""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Dict, List

import torch
from completion_floor import known_draw  # a sibling script (this one runs as a file)
from torch import nn

from zerounlearn_editor.engine.architectures import detect_templates
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_access import get_module

LOG = logging.getLogger("answer_key_subject")


@torch.no_grad()
def last_position_keys(model: nn.Module, tok, text: str, key_modules: List[nn.Module]) -> torch.Tensor:
    """The input of every module in ``key_modules`` at the last token of ``text`` ``[layers, d_ff]``."""
    seen: Dict[int, torch.Tensor] = {}
    hooks = [m.register_forward_pre_hook(lambda _m, inp, i=i: seen.__setitem__(i, inp[0][0, -1].detach().clone()))
             for i, m in enumerate(key_modules)]
    try:
        model(**tok(text, return_tensors="pt", add_special_tokens=False))
    finally:
        for h in hooks:
            h.remove()
    return torch.stack([seen[i] for i in range(len(key_modules))])


def _difference(a: torch.Tensor, b: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Per layer ``|a - b| / |a|`` and cosine, for keys ``[layers, d_ff]``."""
    return {"rel": (a - b).norm(dim=1) / a.norm(dim=1), "cos": nn.functional.cosine_similarity(a, b, dim=1)}


def main() -> None:
    args, model, tok, known = known_draw(__doc__.split("\n")[0])
    templates = detect_templates(model)
    n_layers = templates["num_layers"]
    key_modules = [get_module(model, templates["rewrite_module_tmp"].format(i)) for i in range(n_layers)]
    others = [c.request["subject"] for c in known]
    random.Random(args.seed).shuffle(others)
    answer_rows, subject_rows = [], []
    for case, other in zip(known, others):
        req = case.request
        answer = tok(" " + req["ground_truth"].strip(), add_special_tokens=False)["input_ids"]
        if len(answer) < 2 or other == req["subject"]:
            continue
        first = tok.decode(answer[:1])
        swapped = req["prompt"].replace(req["subject"], other)
        answer_rows.append(_difference(last_position_keys(model, tok, req["prompt"] + first, key_modules),
                                       last_position_keys(model, tok, swapped + first, key_modules)))
        cut = req["prompt"][: req["prompt"].index(req["subject"]) + len(req["subject"])]
        subject_rows.append(_difference(last_position_keys(model, tok, cut, key_modules),
                                        last_position_keys(model, tok, cut.replace(req["subject"], other),
                                                           key_modules)))

    def mean(rows: List[Dict[str, torch.Tensor]], name: str) -> List[float]:
        return torch.stack([r[name] for r in rows]).mean(0).tolist()

    result = {"data": args.data, "n": args.n, "seed": args.seed, "known": len(known), "pairs": len(answer_rows),
              "answer_token_rel": mean(answer_rows, "rel"), "answer_token_cos": mean(answer_rows, "cos"),
              "subject_last_rel": mean(subject_rows, "rel"), "subject_last_cos": mean(subject_rows, "cos")}
    write_json_atomic(Path(args.out), result)
    lines = ["| layer | answer token: rel. difference | cosine | subject's last token: rel. difference | cosine |",
             "|---|---|---|---|---|"]
    lines += [f"| {i} | {result['answer_token_rel'][i]:.2f} | {result['answer_token_cos'][i]:.2f} | "
              f"{result['subject_last_rel'][i]:.2f} | {result['subject_last_cos'][i]:.2f} |"
              for i in range(n_layers)]
    LOG.info("%d known of %d, %d pairs with a multi-token answer", len(known), args.n, len(answer_rows))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
