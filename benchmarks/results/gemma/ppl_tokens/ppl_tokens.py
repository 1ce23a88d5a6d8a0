"""Issue 48: which of the 5000 WikiText-2 tokens carry the perplexity cost of Gemma's `--many` edit?

12.18 left the shipped ``gemma-3-270m-many.yaml`` at +17.1% on the 5000-token perplexity (val, seed 1, n = 1,000)
while the fluency guard read +1.7% on the text's first 256 tokens. This script redoes that row's edit (the same
cases, checked against the stored row; its perplexity checked against the row's) and scores the text per token
before and after: the added NLL per 512-token window and per position in the window, the share of the largest
positions, the tokens that are a forget answer's first token, by the unedited model's NLL quintile; then each
edited layer's change alone and the change scaled (``W + s dW``). One JSON, written after every condition (a rerun
skips the conditions stored).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 5 python benchmarks/results/gemma/ppl_tokens/ppl_tokens.py \
        [--data val|train] [--n 1000] [--seed 1] [--row STORED_ROW_JSON]
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path
from typing import Any, Dict, Sequence

import torch

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, read_text, scored_windows
from zerounlearn_editor.harness.scale_setup import edit_once
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.support.files import read_json, write_json_atomic

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "deep"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "guard"))
from guard_readings import batch_setup  # noqa: E402
from ppl_split import delta_summary  # noqa: E402

LOG = logging.getLogger("ppl_tokens")
HERE = Path(__file__).parent
DATA = {"val": "../shared/data/counterfact/counterfact_easyedit_val_1919.json",
        "train": "../shared/data/counterfact/counterfact_easyedit_train_9484.json"}
POSITION_BINS = (1, 64, 128, 256, 384, 512)
SCALES = (0.5, 0.75)


def token_nll(model: torch.nn.Module, tok: Any, ids: Sequence[int]) -> torch.Tensor:
    """Per-token NLL ``[len(ids)]`` float64 over the 512-token windows the bench's perplexity scores (NaN at the
    first position, which no window scores)."""
    out = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    with eval_mode(model), torch.no_grad():
        # windows as tokenized: the layout the bench scored when this JSON was measured (12.22)
        for w, logits, targets in scored_windows(model, tok, list(ids), 512, 512, 4, bos_windows=False):
            out[w.score_from:w.end] = torch.nn.functional.cross_entropy(logits, targets, reduction="none").double()
    return out


def ppl_of(nll: torch.Tensor) -> float:
    return math.exp(float(nll[~nll.isnan()].mean()))


def spread(base: torch.Tensor, nll: torch.Tensor) -> Dict[str, Any]:
    """Added NLL ``nll - base`` by position in the 512-token window, over the first 256 tokens of the text (the
    guard's tokens, here inside the first window), and by quintile of the unedited model's NLL."""
    delta = (nll - base).nan_to_num(0.0)
    pos = torch.arange(len(base)) % 512
    by_pos = {f"{a}-{b}": round(float(delta[(pos >= a) & (pos < b)].sum()), 3)
              for a, b in zip(POSITION_BINS[:-1], POSITION_BINS[1:])}
    scored = ~base.isnan()
    order = torch.argsort(base.masked_fill(~scored, float("inf")))[: int(scored.sum())]
    fifths = [round(float(delta[chunk].sum()), 3) for chunk in torch.tensor_split(order, 5)]
    return {"ppl": ppl_of(nll), "added_by_position_in_window": by_pos,
            "ppl_first_256_in_window": ppl_of(nll[:256]), "base_ppl_first_256_in_window": ppl_of(base[:256]),
            "added_by_base_nll_quintile_easiest_first": fifths}


def answer_first_tokens(tok: Any, answers: Sequence[str]) -> set:
    return {tok(" " + a.strip(), add_special_tokens=False)["input_ids"][0] for a in answers if a.strip()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams", default="hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml")
    parser.add_argument("--data", choices=sorted(DATA), default="val")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--row", default="benchmarks/results/gemma/rank_step/val/seed_1/"
                        "rank_step_gemma-many-tw100-rank0_n1000.json", help="the stored row the edit must reproduce")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out or HERE / f"{args.data}_n{args.n}_seed{args.seed}")
    result_path = out / "ppl_tokens.json"
    result: Dict[str, Any] = read_json(result_path) if result_path.exists() else {}
    run, setup, cases = batch_setup(args.hparams, DATA[args.data], args.n, args.seed, out)
    row = read_json(args.row) if args.row else None
    if row is not None and row["case_ids"] != [c.case_id for c in cases]:
        raise SystemExit(f"{args.row}: other cases than this draw")
    model, tok, hp = setup.model, setup.tok, run.hps[0]
    ids = leading_token_ids(tok, read_text(default_ppl_text()), 5000)
    base = token_nll(model, tok, ids)
    result["base_ppl"] = ppl_of(base)
    requests = [dict(c.request) for c in cases]
    targets, _, _ = TargetCache(out / "targets", setup.fingerprint).get(model, tok, hp, requests, 50)
    weights_copy, details, _ = edit_once(setup, hp, requests, targets)
    names = sorted(weights_copy)
    edited = {name: dict(model.named_parameters())[name].detach().clone() for name in names}
    original = {name: weights_copy[name].detach().clone() for name in names}
    answers_all = answer_first_tokens(tok, [c.request["ground_truth"] for c in cases])
    result["target_steps_mean"] = details.get("target_steps_mean")

    def measure(label: str, weights: Dict[str, torch.Tensor]) -> None:
        if label in result.get("conditions", {}):
            LOG.info("%s: stored", label)
            return
        with torch.no_grad():
            for name in names:
                dict(model.named_parameters())[name].copy_(weights[name])
        nll = token_nll(model, tok, ids)
        entry = spread(base, nll)
        entry["tokens"] = delta_summary(base, nll, ids, tok, answers_all, math.ceil(len(ids) / 512))
        result.setdefault("conditions", {})[label] = entry
        write_json_atomic(result_path, result)
        LOG.info("%s: PPL %.3f (%+.2f%%)", label, entry["ppl"], 100 * (entry["ppl"] / result["base_ppl"] - 1))

    measure("full", edited)
    if row is not None:
        stored = row["metrics"]["ppl"]
        result["row_ppl"] = stored
        LOG.info("stored row PPL %.4f, here %.4f", stored, result["conditions"]["full"]["ppl"])
    for name in names:
        measure(f"only {name}", {n: (edited[n] if n == name else original[n]) for n in names})
    for s in SCALES:
        measure(f"scale {s}", {n: original[n] + s * (edited[n] - original[n]) for n in names})
    restore_weights(model, weights_copy)
    write_json_atomic(result_path, result)


if __name__ == "__main__":
    main()
