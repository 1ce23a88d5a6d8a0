"""Where does a forgotten answer come back from in context? (issue 26 part 2, diagnosis)

For the cases of an audit seed file (its case ids and its drawn 3-shot examples), on SmolLM2:

* cosine between the subject's key (down_proj input at the subject's last token) in the bare
  prompt and in the audit's 3-shot / question / chat prompts, per edited layer, next to the mean
  cosine between two different facts' bare keys (the scale);
* the logit lens on the unedited model: the first layer where the answer's first token is in the
  top 10 at the last position (bare prompt and 3-shot prompt);
* after the edit of a YAML (default the paper's ZeroUnlearn-GD): the value change ``||W' k - W k||``
  of each context's key relative to the bare key's, per layer, and the lens's best rank per layer.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/deep/diagnose.py --audit-seed OUT/audit_seed_11.json \\
        --hparams hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml --out benchmarks/results/deep/diagnose_seed11.json
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
from pathlib import Path
from typing import Dict, List

import torch

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.engine.hparams import load_config_file
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer


def subject_last_index(tok, prompt: str, subject: str) -> int:
    """Token index of the subject's last token (its last occurrence in ``prompt``)."""
    start = prompt.rindex(subject)
    prefix_ids = tok(prompt[: start + len(subject)])["input_ids"]
    return len(prefix_ids) - 1


def keys_at(model, tok, prompt: str, position: int, layers: List[int]) -> Dict[int, torch.Tensor]:
    """down_proj inputs ``[d_in]`` at ``position`` for every layer."""
    store: Dict[int, torch.Tensor] = {}
    handles = []
    for layer in layers:
        module = model.model.layers[layer].mlp.down_proj
        handles.append(module.register_forward_pre_hook(
            lambda m, args, layer=layer: store.__setitem__(layer, args[0][0, position].detach().double())))
    with torch.no_grad():
        model(**tok(prompt, return_tensors="pt"))
    for h in handles:
        h.remove()
    return store


def lens_ranks(model, tok, prompt: str, answer: str) -> List[int]:
    """Rank of the answer's first token at the last position after every layer (0 = top)."""
    prompt_ids = tok(prompt)["input_ids"]
    token = tok(prompt + " " + answer.strip())["input_ids"][len(prompt_ids)]
    names = [f"model.layers.{l}" for l in range(len(model.model.layers))]
    captured: Dict[str, torch.Tensor] = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, o, n=n: captured.__setitem__(n, (o[0] if isinstance(o, tuple) else o).detach())) for n in names]
    with torch.no_grad():
        model(**tok(prompt, return_tensors="pt"))
    for h in handles:
        h.remove()
    ranks = []
    for name in names:  # each decoder layer's output (before the final norm), then the norm and the head
        logits = model.lm_head(model.model.norm(captured[name][0, -1]))
        ranks.append(int((logits > logits[token]).sum()))
    return ranks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--audit-seed", required=True)
    ap.add_argument("--hparams", default="hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml")
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.manual_seed(0)
    record = json.loads(Path(args.audit_seed).read_text())
    by_id = {c.case_id: c for c in load_cases(args.data)}
    cases = [by_id[i] for i in record["case_ids"]]
    ic3 = record["plan"]["in_context"]["3"]
    config = load_config_file(args.hparams)
    cls = ZeroUnlearnGDHyperParams if config["alg_name"] == "ZeroUnlearn-GD" else ZeroUnlearnHyperParams
    hp = cls.from_hparams(args.hparams)
    model, tok = load_model_and_tokenizer(hp.model_name)
    model.eval()
    layers = list(hp.layers)
    contexts = {}
    for case, examples in zip(cases, ic3):
        r = case.request
        chat = tok.apply_chat_template([{"role": "user", "content": f"Complete: {r['prompt']}"}], tokenize=False,
                                       add_generation_prompt=True) + r["prompt"]
        contexts[case.case_id] = {
            "bare": r["prompt"],
            "ic3": "".join(e.strip() + ".\n" for e in examples) + r["prompt"],
            "question": f"Q: {r['prompt']} what? A:",
            "chat": chat,
        }
    keys = {}
    for case in cases:
        keys[case.case_id] = {
            name: keys_at(model, tok, text, subject_last_index(tok, text, case.request["subject"]), layers)
            for name, text in contexts[case.case_id].items()
        }
    cos = lambda a, b: float(a @ b / (a.norm() * b.norm()))  # noqa: E731
    result = {"cases": record["case_ids"], "layers": layers, "hparams": args.hparams}
    result["key_cosine_to_bare"] = {
        name: {str(l): statistics.mean(cos(keys[c][name][l], keys[c]["bare"][l]) for c in keys) for l in layers}
        for name in ("ic3", "question", "chat")}
    ids = list(keys)
    result["key_cosine_between_facts"] = {str(l): statistics.mean(
        cos(keys[a]["bare"][l], keys[b]["bare"][l]) for i, a in enumerate(ids) for b in ids[i + 1:]) for l in layers}
    base_lens = {c.case_id: {name: lens_ranks(model, tok, contexts[c.case_id][name], c.request["ground_truth"])
                             for name in ("bare", "ic3")} for c in cases}
    first_top10 = lambda ranks: next((i for i, r in enumerate(ranks) if r < 10), None)  # noqa: E731
    result["base_first_top10_layer"] = {
        name: [first_top10(base_lens[c][name]) for c in base_lens] for name in ("bare", "ic3")
    }
    result["base_median_rank_per_layer"] = {
        name: [statistics.median(base_lens[c][name][l] for c in base_lens) for l in range(len(base_lens[ids[0]][name]))]
        for name in ("bare", "ic3")
    }
    weights = {l: model.model.layers[l].mlp.down_proj.weight.detach().double().clone() for l in layers}
    apply = apply_zerounlearn_gd_to_model if cls is ZeroUnlearnGDHyperParams else apply_zerounlearn_to_model
    requests = [dict(c.request) for c in cases]
    model, orig = apply(model, tok, requests, hp, return_orig_weights=True, progress=False)
    delta = {l: model.model.layers[l].mlp.down_proj.weight.detach().double() - weights[l] for l in layers}
    result["value_change_relative_to_bare"] = {
        name: {
            str(l): statistics.mean(
                float((delta[l] @ keys[c][name][l]).norm() / (delta[l] @ keys[c]["bare"][l]).norm()) for c in keys
            )
            for l in layers
        }
        for name in ("ic3", "question", "chat")
    }
    edited_lens = {c.case_id: {name: lens_ranks(model, tok, contexts[c.case_id][name], c.request["ground_truth"])
                               for name in ("bare", "ic3", "question", "chat")} for c in cases}
    result["edited_median_rank_per_layer"] = {name: [statistics.median(edited_lens[c][name][l] for c in edited_lens)
                                                     for l in range(len(edited_lens[ids[0]][name]))]
                                              for name in ("bare", "ic3", "question", "chat")}
    result["edited_final_rank0"] = {name: sum(edited_lens[c][name][-1] == 0 for c in edited_lens)
                                    for name in ("bare", "ic3", "question", "chat")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if "per_layer" not in k}, indent=1))


if __name__ == "__main__":
    main()
