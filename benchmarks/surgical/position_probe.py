"""Where in a lost neighbour's prompt does the edit do its damage? (issue 10 diagnosis)

For each seed: sample the cases exactly as ``benchmarks/surgical/harness.py`` does, edit with one
ZeroUnlearn-GD(+R) setting, and for every neighbourhood prompt the unedited model answered (token
accuracy > 0) and the edit broke (accuracy lower after it), measure the first answer token's
probability with the edited ``down_proj`` weights used

* at every position (``full``) and at none (``none``, = the unedited model),
* at one position only (``only_at[i]``): does the edit at that token alone break the fact?
* at every position but one (``all_but[i]``): does sparing that token alone save it?

Each edited layer's output is mixed per position between the edited and the original weight (a
forward hook on ``down_proj``), so the numbers isolate positions, not layers. The retain set and
the neutral targets are those of ``surgical/harness.py`` (``--targets-dir`` reuses its cache folder)::

    OMP_NUM_THREADS=1 python benchmarks/surgical/position_probe.py --data counterfact-easyedit --n 50 \\
        --seeds 11-13 --retain same-answer:5 --targets-dir benchmarks/results/surgical/ts_n50_seeds11-13/targets \\
        --out benchmarks/results/surgical/position_probe_n50_seeds11-13.json

Writes the JSON (per lost neighbour: tokens, probabilities, the worst single position) and prints
one line per lost neighbour.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path
from statistics import fmean
from typing import Any, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as surgical  # noqa: E402  (benchmarks/surgical/harness.py: the same sampling, retain draw and target cache)
from zerounlearn_editor.data.datasets import load_cases, sample_cases  # noqa: E402
from zerounlearn_editor.engine.pipeline import (
    EditReport,
    batched_statistics,
    restore_weights,
    target_settings,
)  # noqa: E402
from zerounlearn_editor.harness.bench_config import parse_seeds  # noqa: E402
from zerounlearn_editor.harness.case_scoring import score_cases  # noqa: E402
from zerounlearn_editor.harness.method_specs import load_main_hparams  # noqa: E402
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours  # noqa: E402
from zerounlearn_editor.harness.retain_sets import draw_retain, parse_retain_spec  # noqa: E402
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model  # noqa: E402
from zerounlearn_editor.support.files import write_json_atomic  # noqa: E402
from zerounlearn_editor.support.model_access import get_module  # noqa: E402
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer  # noqa: E402

LOG = logging.getLogger("position_probe")


class PositionMixer:
    """Forward hooks that use the edited weight only at chosen positions of ``down_proj``'s input.

    ``original`` maps a module name to its unedited weight ``[d_out, d_in]``; with ``mask`` set to
    a ``[rows, seq]`` bool tensor, a hooked module's output is ``W' k`` where the mask is true and
    ``W k`` elsewhere (``mask = None``: the edited model unchanged).
    """

    def __init__(self, model, original: Dict[str, torch.Tensor]):
        self.mask: Optional[torch.Tensor] = None
        self._handles = [get_module(model, name).register_forward_hook(self._hook(w)) for name, w in original.items()]

    def _hook(self, weight: torch.Tensor):
        def hook(_module, inputs, output):
            if self.mask is None:
                return output
            unedited = torch.nn.functional.linear(inputs[0], weight)
            return torch.where(self.mask.to(output.device)[:, :, None], output, unedited)

        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def position_masks(length: int) -> torch.Tensor:
    """``[2 * length + 2, length]`` bool: the edit nowhere, everywhere, at each position alone, at all but each."""
    eye = torch.eye(length, dtype=torch.bool)
    return torch.cat([torch.zeros(1, length, dtype=torch.bool), torch.ones(1, length, dtype=torch.bool), eye, ~eye])


def _first_token_probs(model, tok, mixer: PositionMixer, prompt: str, answer: str) -> List[float]:
    """The answer's first-token probability under every mask of :func:`position_masks`, in one batched forward."""
    ids = tok(prompt, return_tensors="pt").input_ids
    answer_id = tok(" " + answer.strip()).input_ids[0]
    masks = position_masks(ids.shape[1])
    mixer.mask = masks
    try:
        with torch.no_grad():
            logp = model(input_ids=ids.expand(len(masks), -1)).logits[:, -1].float().log_softmax(-1)
    finally:
        mixer.mask = None
    return logp[:, answer_id].exp().tolist()


def probe_seed(model, tok, hp, moments, pool, known, n: int, seed: int, retain_spec: str,
               targets_dir: Path) -> List[Dict[str, Any]]:
    """The lost neighbours of one seed with their per-position probabilities (``moments``: C0 per layer)."""
    cases, _ = drop_batch_forget_neighbours(sample_cases(known, n, seed))
    requests = [dict(c.request) for c in cases]
    draw = parse_retain_spec(retain_spec)
    retain = draw_retain(draw, cases, pool, seed) if draw and hp.retain_nullspace_weight > 0 else None
    key = hashlib.sha256(json.dumps(target_settings(model, hp), sort_keys=True).encode()).hexdigest()[:12]
    targets = surgical._targets(targets_dir / f"seed_{seed}_n{n}_{key}.npz", model, tok, requests, hp, retain)
    pre = score_cases(model, tok, cases)
    names = [hp.rewrite_module_tmp.format(layer) for layer in hp.layers]
    original = {name: get_module(model, name).weight.detach().clone() for name in names}
    _, weights = apply_zerounlearn_gd_to_model(
        model,
        tok,
        requests,
        hp,
        return_orig_weights=True,
        second_moments=moments,
        targets=targets,
        progress=False,
        report=EditReport(),
        retain=retain,
    )
    mixer = PositionMixer(model, original)
    rows: List[Dict[str, Any]] = []
    try:
        post = score_cases(model, tok, cases)
        for case, before, after in zip(cases, pre, post):
            if not (
                fmean(before.neighbour["acc"]) > 0 and fmean(after.neighbour["acc"]) < fmean(before.neighbour["acc"])
            ):
                continue
            for probe in case.neighbour:
                prompt, answer = probe.prompt, probe.answer
                tokens = [tok.decode([t]) for t in tok(prompt).input_ids]
                length = len(tokens)
                probs = _first_token_probs(model, tok, mixer, prompt, answer)
                only_at, all_but = probs[2 : 2 + length], probs[2 + length :]
                worst = min(range(length), key=lambda i: only_at[i])
                row = {
                    "seed": seed,
                    "prompt": prompt,
                    "answer": answer,
                    "tokens": tokens,
                    "none": probs[0],
                    "full": probs[1],
                    "only_at": only_at,
                    "all_but": all_but,
                    "worst_position": worst,
                    "worst_is_last_token": worst == length - 1,
                    "forget_cases_sharing_answer": sum(
                        str(c.request["ground_truth"]).strip().casefold() == answer.strip().casefold() for c in cases
                    ),
                }
                rows.append(row)
                print(f"seed {seed} | {prompt!r} -> {answer} | unedited {row['none']:.2f} edited {row['full']:.2f} | "
                      f"worst alone: {tokens[worst]!r} (position {worst} of {length}) {only_at[worst]:.2f}, "
                      f"all but it {all_but[worst]:.2f}", flush=True)
    finally:
        mixer.remove()
        restore_weights(model, weights)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hparams", default="hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain.yaml")
    parser.add_argument("--overrides", default="{}", help="JSON mapping of hparams keys to change")
    parser.add_argument("--data", default="counterfact-easyedit")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--seeds", default="11-13")
    parser.add_argument("--retain", default="same-answer:5")
    parser.add_argument("--known-min-accuracy", type=float, default=1.0)
    parser.add_argument(
        "--targets-dir", required=True, help="surgical/harness.py's targets cache folder (filled if missing)"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    hp = load_main_hparams(args.hparams).replace(**json.loads(args.overrides))
    if hp.alg_name != "ZeroUnlearn-GD":
        raise SystemExit("position_probe.py: only ZeroUnlearn-GD settings are probed")
    model, tok = load_model_and_tokenizer(str(hp.model_name))
    pool = load_cases(args.data)
    targets_dir = Path(args.targets_dir)
    known = surgical._known(targets_dir.parent, model, tok, pool, args.data, args.known_min_accuracy)
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    rows: List[Dict[str, Any]] = []
    for seed in parse_seeds(args.seeds):
        rows += probe_seed(model, tok, hp, moments, pool, known, args.n, seed, args.retain, targets_dir)
    last = sum(r["worst_is_last_token"] for r in rows)
    summary = {
        "lost_neighbours": len(rows),
        "worst_at_last_prompt_token": last,
        "worst_elsewhere": len(rows) - last,
        "saved_by_sparing_worst_position": sum(r["all_but"][r["worst_position"]] >= 0.5 * r["none"] for r in rows),
    }
    write_json_atomic(Path(args.out), {"settings": vars(args), "summary": summary, "neighbours": rows})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
