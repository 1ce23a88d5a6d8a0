"""Issue 48: does the shipped Gemma `--many` edit need its full size, and which fluency guard would have seen it?

``ppl_tokens.py`` found the cost of the shipped ``gemma-3-270m-many.yaml`` edit (val, seed 1, n = 1,000; PPL
+17.1% on 5000 WikiText-2 tokens) spread over layers and tokens, and the guard's 256 tokens (the text's first, an
easy passage: base PPL 19 against 71 over 5000) reading +1.7%. This script redoes the same edit (targets from
``ppl_tokens.py``'s cache, cases checked against the stored row) and, for the change scaled (``W + s dW``, s = 0.25,
0.5, 0.75, 1) and for each layer's change alone:

* the bench's probe metrics on all 1,000 cases (``score_cases`` / ``scale_metrics``, the bench's own functions:
  known first-token Eff, Spe, ...) for the scaled changes, and PPL on the 5000 tokens for s = 0.25;
* guard readings of candidate guard texts: the shipped guard (first 256 tokens, one window), the first 1024 tokens
  in 256-token windows, and 4 or 8 windows of 256 tokens taken from tokens 5000-15000 (text the 5000-token
  perplexity does not score, so their agreement with it is out of sample).

One JSON beside this file's ``ppl_tokens.json``, written after every condition (a rerun skips stored ones).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 5 python benchmarks/results/gemma/ppl_tokens/guard_scale.py
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Dict

import torch

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.engine.fluency_guard import guard_perplexity
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, read_text
from zerounlearn_editor.harness.case_scoring import score_cases
from zerounlearn_editor.harness.scale_metrics import known_mask, scale_metrics
from zerounlearn_editor.harness.scale_setup import edit_once
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.support.files import read_json, write_json_atomic

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "guard"))
from guard_readings import batch_setup, guard_texts  # noqa: E402
from ppl_tokens import DATA, ppl_of, token_nll  # noqa: E402

LOG = logging.getLogger("guard_scale")
HERE = Path(__file__).parent
ROW = "benchmarks/results/gemma/rank_step/val/seed_1/rank_step_gemma-many-tw100-rank0_n1000.json"
SCALES = (0.25, 0.5, 0.75, 1.0)
SCALE_TEXTS = ("first_256 (shipped guard)", "first_1024", "4x256_from_5000", "8x256_from_5000")
"""The candidate guard texts this script read (a subset of ``guard_readings.guard_texts``, same names and spans)."""


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = HERE / "val_n1000_seed1"
    result_path = out / "guard_scale.json"
    result: Dict[str, Any] = read_json(result_path) if result_path.exists() else {}
    run, setup, cases = batch_setup("hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml", DATA["val"], 1000, 1, out)
    row = read_json(ROW)
    if row["case_ids"] != [c.case_id for c in cases]:
        raise SystemExit(f"{ROW}: other cases than this draw")
    model, tok, hp = setup.model, setup.tok, run.hps[0]
    text_ids = leading_token_ids(tok, read_text(default_ppl_text()), 15000)
    guards = {k: v for k, v in guard_texts(text_ids).items() if k in SCALE_TEXTS}
    ppl_ids = text_ids[:5000]
    if "base" not in result:
        result["base"] = {"guards": {k: guard_perplexity(model, tok, v) for k, v in guards.items()}}
        write_json_atomic(result_path, result)
    pre = score_cases(model, tok, cases)
    known = known_mask(pre, row["known_min_accuracy"])
    requests = [dict(c.request) for c in cases]
    targets, _, _ = TargetCache(out / "targets", setup.fingerprint).get(model, tok, hp, requests, 50)
    weights_copy, _, _ = edit_once(setup, hp, requests, targets)
    names = sorted(weights_copy)
    params = dict(model.named_parameters())
    edited = {name: params[name].detach().clone() for name in names}
    original = {name: weights_copy[name].detach().clone() for name in names}

    def measure(label: str, weights: Dict[str, torch.Tensor], probes: bool, ppl: bool) -> None:
        if label in result.get("conditions", {}):
            LOG.info("%s: stored", label)
            return
        with torch.no_grad():
            for name in names:
                params[name].copy_(weights[name])
        entry: Dict[str, Any] = {"guards": {k: guard_perplexity(model, tok, v) for k, v in guards.items()}}
        if probes:
            entry["metrics"] = scale_metrics(score_cases(model, tok, cases), pre, known)
        if ppl:
            entry["ppl"] = ppl_of(token_nll(model, tok, ppl_ids))
        result.setdefault("conditions", {})[label] = entry
        write_json_atomic(result_path, result)
        base = result["base"]["guards"]
        LOG.info("%s: %s", label, {k: round(v / base[k] - 1, 4) for k, v in entry["guards"].items()})
        if probes:
            LOG.info("%s: eff_first_known %.2f spe %.2f", label, entry["metrics"]["eff_first_known"],
                     entry["metrics"]["spe"])

    for s in SCALES:
        measure(f"scale {s}", {n: original[n] + s * (edited[n] - original[n]) for n in names}, True, s == 0.25)
    for name in names:
        measure(f"only {name}", {n: (edited[n] if n == name else original[n]) for n in names}, False, False)
    restore_weights(model, weights_copy)
    result["row_metrics"] = row["metrics"]
    write_json_atomic(result_path, result)


if __name__ == "__main__":
    main()
