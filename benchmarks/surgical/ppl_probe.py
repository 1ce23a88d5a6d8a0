"""Where does the n = 50 edit's perplexity cost come from? (issue 10 diagnosis)

For one seed of the surgical harness (same cases, retain draw and cached targets as ``benchmarks/surgical/harness.py``)
and one ZeroUnlearn-GD(+R) setting, on the perplexity text (the embedded WikiText-2 test split, 8 windows of 512
tokens):

* per-token NLL before / after the edit: PPL, the share of tokens made worse, the share of the NLL increase
  carried by the worst 1% / 10% of tokens, and the worst tokens;
* the EOS probability before / after, and PPL with the EOS mass taken out (``nll + log(1 - p_eos)``): is the
  cost the neutral target (EOS) leaking into general text?
* PPL with only one edited layer's new weight (the others unedited);
* per edited layer: the rank of ``C0``'s own null space at ``nullspace_threshold`` (the edit's is that of the
  protected covariance, which with a retain set or context protection is a little smaller) and the mean key
  energy in it,
  ``|U0^T k|^2`` (absolute and as a share of ``|k|^2``), on 200 corpus passages *not* used for ``C0``
  (passages 400-599 of the statistics corpus) and on the perplexity text;
* the targets: the residual's norm relative to the hidden state's (how many sit on the clamp).

    OMP_NUM_THREADS=1 python benchmarks/surgical/ppl_probe.py --seed 11 --retain same-answer:10 \\
        --targets-dir <surgical/harness.py --out folder>/targets --overrides '{"norm_weight": 300.0, "layers": [12, 13,
        14, 15, 16, 17, 18]}' \\
        --out benchmarks/results/surgical/ppl_probe_n50_seed11.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Any, Dict

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as surgical  # noqa: E402  (the same sampling, retain draw and target cache)
from zerounlearn_editor.data.builtin import default_ppl_text  # noqa: E402
from zerounlearn_editor.data.corpus import load_corpus  # noqa: E402
from zerounlearn_editor.data.datasets import load_cases, sample_cases  # noqa: E402
from zerounlearn_editor.engine.pipeline import batched_statistics, restore_weights, target_settings  # noqa: E402
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, read_text  # noqa: E402
from zerounlearn_editor.harness.method_specs import load_main_hparams  # noqa: E402
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours  # noqa: E402
from zerounlearn_editor.harness.retain_sets import draw_retain, parse_retain_spec  # noqa: E402
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model  # noqa: E402
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis  # noqa: E402
from zerounlearn_editor.support.files import write_json_atomic  # noqa: E402
from zerounlearn_editor.support.model_access import get_module  # noqa: E402
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer  # noqa: E402

LOG = logging.getLogger("ppl_probe")
WINDOWS, WINDOW = 8, 512


def token_nll(model, windows: torch.Tensor, eos: int):
    """``(nll, p_eos)`` ``[windows, WINDOW - 1]`` of the next token at every position."""
    nll, peos = [], []
    with torch.no_grad():
        for i in range(0, len(windows), 4):
            logp = model(windows[i : i + 4]).logits[:, :-1].float().log_softmax(-1)
            nll.append(-logp.gather(-1, windows[i : i + 4, 1:, None])[..., 0])
            peos.append(logp[..., eos].exp())
    return torch.cat(nll), torch.cat(peos)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams", default="hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml")
    parser.add_argument("--overrides", default="{}", help="JSON mapping of hparams to change")
    parser.add_argument("--data", default="counterfact-easyedit")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--retain", default="same-answer:10", help="retain draw as in surgical/harness.py, or 'none'")
    parser.add_argument(
        "--targets-dir",
        required=True,
        help="a surgical/harness.py run's targets folder (reused or filled; "
        "--data, --n and --retain must be that run's, as its target file names do not hold the cases)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    hp = load_main_hparams(args.hparams).replace(**json.loads(args.overrides))
    model, tok = load_model_and_tokenizer(str(hp.model_name))
    pool = load_cases(args.data)
    known = surgical._known(Path(args.targets_dir).parent, model, tok, pool, args.data, 1.0)
    cases, _ = drop_batch_forget_neighbours(sample_cases(known, args.n, args.seed))
    requests = [dict(c.request) for c in cases]
    draw = parse_retain_spec(args.retain)
    retain = draw_retain(draw, cases, pool, args.seed) if draw else None
    key = hashlib.sha256(json.dumps(target_settings(model, hp), sort_keys=True).encode()).hexdigest()[:12]
    targets = surgical._targets(
        Path(args.targets_dir) / f"seed_{args.seed}_n{args.n}_{key}.npz", model, tok, requests, hp, retain
    )
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)

    ids = torch.tensor(leading_token_ids(tok, read_text(str(default_ppl_text())), WINDOWS * WINDOW + 1))
    windows = ids[: WINDOWS * WINDOW].view(WINDOWS, WINDOW)
    eos = int(tok.eos_token_id)
    base_nll, base_peos = token_nll(model, windows, eos)

    # key energy in the null space, before any edit
    keys: Dict[int, list] = {l: [] for l in hp.layers}

    def grab(layer):
        def hook(_m, inputs, _out):
            keys[layer].append(inputs[0].detach().reshape(-1, inputs[0].shape[-1]).double())
        return hook

    handles = [get_module(model, hp.rewrite_module_tmp.format(l)).register_forward_hook(grab(l)) for l in hp.layers]
    try:
        with torch.no_grad():
            for text in load_corpus(str(hp.mom2_dataset), limit=hp.mom2_n_samples + 200).texts[hp.mom2_n_samples :]:
                model(tok(text, return_tensors="pt", truncation=True, max_length=hp.mom2_max_length).input_ids)
            held = {l: torch.cat(v) for l, v in keys.items()}
            for l in keys:
                keys[l] = []
            for i in range(WINDOWS):
                model(windows[i : i + 1])
            ppl_keys = {l: torch.cat(v) for l, v in keys.items()}
    finally:
        for h in handles:
            h.remove()
    null: Dict[str, Any] = {}
    for l in hp.layers:
        U0, _ = nullspace_basis(moments[l].moment(), hp.nullspace_threshold)

        def energy(K: torch.Tensor) -> Dict[str, float]:
            e = (K @ U0).square().sum(1)
            return {
                "mean": float(e.mean()),
                "share": float((e / K.square().sum(1)).mean()),
                "p99": float(e.quantile(0.99)),
            }

        null[str(l)] = {
            "of": "C0 alone",
            "rank": int(U0.shape[1]),
            "d_in": int(U0.shape[0]),
            "held_out_passages": energy(held[l]),
            "ppl_text": energy(ppl_keys[l]),
        }

    _, original = apply_zerounlearn_gd_to_model(
        model,
        tok,
        requests,
        hp,
        return_orig_weights=True,
        second_moments=moments,
        targets=targets,
        progress=False,
        retain=retain,
    )
    try:
        edited = {name: get_module(model, name[: -len(".weight")]).weight.detach().clone() for name in original}
        nll, peos = token_nll(model, windows, eos)
        restore_weights(model, original)
        single = {}
        for name, weight in edited.items():
            module = get_module(model, name[: -len(".weight")])
            module.weight.data.copy_(weight)
            single[name.split(".")[2]] = float(token_nll(model, windows, eos)[0].mean().exp())
            module.weight.data.copy_(original[name])
    finally:
        restore_weights(model, original)
    delta = (nll - base_nll).flatten()
    flat_tokens = windows[:, 1:].flatten()
    k1, k10 = len(delta) // 100, len(delta) // 10
    rel = (targets.z - targets.h0).norm(dim=1) / targets.h0.norm(dim=1)
    result = {
        "settings": {
            "hparams": args.hparams,
            "overrides": json.loads(args.overrides),
            "data": args.data,
            "n": args.n,
            "seed": args.seed,
            "retain": args.retain,
            "tokens": int(delta.numel()),
        },
        "ppl_base": float(base_nll.mean().exp()),
        "ppl_edited": float(nll.mean().exp()),
        "p_eos_base": float(base_peos.mean()),
        "p_eos_edited": float(peos.mean()),
        "ppl_base_without_eos_mass": float((base_nll + torch.log1p(-base_peos.clamp(max=0.999))).mean().exp()),
        "ppl_edited_without_eos_mass": float((nll + torch.log1p(-peos.clamp(max=0.999))).mean().exp()),
        "share_of_tokens_worse": float((delta > 0).float().mean()),
        "share_of_increase_worst_1pct": float(delta.topk(k1).values.sum() / delta.sum()),
        "share_of_increase_worst_10pct": float(delta.topk(k10).values.sum() / delta.sum()),
        "worst_tokens": [
            [tok.decode([int(flat_tokens[i])]), round(float(delta[i]), 3)] for i in delta.topk(15).indices
        ],
        "ppl_with_one_edited_layer": single,
        "nullspace_key_energy": null,
        "targets_residual_over_hidden": {
            "quantiles_0_25_50_75_100": [float(q) for q in rel.quantile(torch.tensor([0, 0.25, 0.5, 0.75, 1.0]))],
            "share_on_clamp": float((rel > hp.clamp_norm_factor * 0.999).float().mean()),
            "clamp": hp.clamp_norm_factor,
        },
    }
    write_json_atomic(Path(args.out), result)
    LOG.info("PPL %.2f -> %.2f (without EOS mass %.2f -> %.2f); worst 1%% of tokens carry %.0f%% of the increase",
             result["ppl_base"], result["ppl_edited"], result["ppl_base_without_eos_mass"],
             result["ppl_edited_without_eos_mass"], 100 * result["share_of_increase_worst_1pct"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
