"""Issue 48: how the forget keys' null-space energy spreads over the null directions' text variances.

One process, one model load, the bench's cases (``--data-path``, ``--n``, ``--seed``; the bench's sampling and
neighbour drop, as ``layers_diag.py``). The neutral targets are optimised once; then for each text weight ``w`` of
``--chain`` the real layer-by-layer edit runs with ``nullspace_text_weight: w`` (keys of later layers
read after the earlier layers' writes), records per edited layer what the solve saw, counts the facts still answered
(greedy, the edit's own check), optionally the WikiText-2 PPL (``--ppl-tokens`` > 0), and restores the weights.

Per edited layer (``U0`` ``[d_in, r]`` the null eigenvectors, ``e_j`` their eigenvalues, ``t`` the threshold, ``x_j =
e_j / t`` in [0, 1), ``Kt = U0^T K_f`` ``[r, n]``, ``s_j = ||Kt_j,:||^2`` the forget keys' energy on direction j):

* ``key_null_share``: ``sum_j s_j / ||K_f||^2``; ``x_mean``: the unweighted mean of ``x_j``; ``m``: the key-energy
  weighted mean ``sum_j s_j x_j / sum_j s_j``; ``x_s_median``: the ``s``-weighted median of ``x``; ``s_hi``: the
  share of ``sum s`` on directions with ``x_j > 0.5``;
* ``A0``: ``(b / c) sum_j s_j / n`` (target weight over penalty times the mean key energy in the null space: the
  one-fact closed form reaches ``A / (1 + A)`` of its value change);
* ``R(w) = sum_j s_j / (1 + w x_j) / sum_j s_j``: the factor by which the weight shrinks ``A`` (one fact, the
  target term against the weighted penalty: ``A(w) = (b / c) sum_j s_j / (1 + w x_j)``);
* ``kappa(w)``: per direction, the diagonal closed form's share of the update left by the weight, ``(b s_j + c) /
  (b s_j + c (1 + w x_j))``, ``s``-weighted mean;
* for every ``w`` of ``--grid``, this layer's problem solved with that weight (the chain's keys and value targets):
  ``value_reached`` ``1 - |dW K_f - dv| / |dv|``, ``text_change`` ``sqrt(tr(dW C0 dW^T) / tr(W C0 W^T))``,
  ``rel_change`` ``|dW| / |W|``.

    PYTHONPATH=$PWD python benchmarks/gemma/textweight_diag.py \\
        --hparams benchmarks/results/gemma/rules/gemma-rules.yaml \\
        --data-path benchmarks/results/gemma/n50/cf_train700_gemma_known.json --n 50 --seed 1 \\
        --chain 0 --chain 10 --chain 100 --out diag.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, Sequence

import torch

from zerounlearn_editor.cli.common import load_hparams
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.engine import pipeline
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets, restore_weights, run_layerwise_edit
from zerounlearn_editor.engine.post_mlp import value_targets
from zerounlearn_editor.engine.stats.eigen_cache import eigen_cache_of
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours
from zerounlearn_editor.methods.zerounlearn_gd.config import TEXT_WEIGHT_KEY
from zerounlearn_editor.methods.zerounlearn_gd.method import nullspace_of_problem, zerounlearn_gd_solver
from zerounlearn_editor.methods.zerounlearn_gd.solve import relative_text_weight, solve_exact, text_weighted_basis
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("textweight_diag")
PREDICT_W = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def weighted_median(x: torch.Tensor, weight: torch.Tensor) -> float:
    """The ``weight``-weighted median of ``x`` (both ``[r]``)."""
    order = torch.argsort(x)
    cum = torch.cumsum(weight[order], 0)
    return float(x[order][int(torch.searchsorted(cum, cum[-1] / 2))])


def spread(x: torch.Tensor, s: torch.Tensor, n: int, b: float, c: float) -> Dict[str, Any]:
    """The key-energy spread over ``x = e / t`` ``[r]`` with energies ``s`` ``[r]`` (module doc)."""
    total = float(s.sum())
    out: Dict[str, Any] = dict(
        x_mean=float(x.mean()), m=float((s * x).sum() / total), x_s_median=weighted_median(x, s),
        s_hi=float(s[x > 0.5].sum() / total), A0=b / c * total / n,
    )
    out["R"] = {str(w): float((s / (1 + w * x)).sum() / total) for w in PREDICT_W}
    out["kappa"] = {str(w): float((s * (b * s + c) / (b * s + c * (1 + w * x))).sum() / total) for w in PREDICT_W}
    return out


def solve_quantities(problem, hp, U0: torch.Tensor, e0: torch.Tensor, dv: torch.Tensor, w: float) -> Dict[str, float]:
    """This layer's problem solved with text weight ``w``: value reached, text change, weight change."""
    basis = text_weighted_basis(U0, e0, w, hp.nullspace_threshold)
    dW = solve_exact(problem.W, problem.K_f, problem.M_f, problem.M_n, basis, a=hp.orthogonality_weight,
                     b=hp.target_weight, c=hp.norm_weight)
    W, K, C0 = problem.W.double(), problem.K_f.double(), problem.C0.double()
    return dict(
        value_reached=float(1 - (dW @ K - dv).norm() / dv.norm().clamp_min(1e-30)),
        text_change=float(torch.sqrt(torch.trace(dW @ C0 @ dW.t()) / torch.trace(W @ C0 @ W.t()))),
        rel_change=float(dW.norm() / W.norm()),
    )


class Recorder:
    """Wraps ``pipeline.value_targets`` (to keep ``dv``) and the solve (to record the spread and the grid)."""

    def __init__(self, grid: Sequence[float]):
        self.grid = list(grid)
        self.rows: Dict[int, Dict[str, Any]] = {}
        self.dv: torch.Tensor = torch.zeros(0)

    def value_targets(self, W, K_f, delta, spec, bias=None):
        M_n = value_targets(W, K_f, delta, spec, bias)
        self.dv = (M_n - W @ K_f).double()
        return M_n

    def solver(self, hp, rule: str = ""):
        """The solve with ``hp``'s text weight, or with ``rule`` (``layer:A`` / ``first:A``, module doc)."""
        cache = eigen_cache_of(hp.stats_dir)
        mode, _, reach = rule.partition(":")
        if mode not in ("", "layer", "first"):
            raise SystemExit(f"textweight_diag.py: a rule is layer:A or first:A, got {rule!r}")
        chosen: Dict[str, float] = {}

        def solve(problem):
            U0, e0 = nullspace_of_problem(problem, hp, cache)
            t = hp.nullspace_threshold
            x = (e0.double() / t).clamp_min(0.0)
            K = problem.K_f.double()
            Kt = U0.double().t() @ K
            s = Kt.pow(2).sum(dim=1)
            row = spread(x, s, K.shape[1], hp.target_weight, hp.norm_weight)
            row.update(null_rank=int(U0.shape[1]), key_null_share=float(s.sum() / K.pow(2).sum()),
                       dv_norm=float(self.dv.norm(dim=0).mean()))
            hp_l = hp
            if mode:
                if mode == "layer" or "w" not in chosen:
                    chosen["w"] = relative_text_weight(Kt, x, float(reach), hp.target_weight, hp.norm_weight)
                hp_l = dataclasses.replace(hp, **{TEXT_WEIGHT_KEY: chosen["w"]})
                row["rule_w"] = chosen["w"]
            grid = sorted(set(self.grid) | ({chosen["w"]} if mode else set()))
            row["grid"] = {str(w): solve_quantities(problem, hp, U0, e0, self.dv, w) for w in grid}
            self.rows[problem.layer] = row
            return zerounlearn_gd_solver(hp_l)(problem)
        return solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hparams", required=True)
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--data-path", required=True)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chain", action="append", required=True,
                    help="one edit chain: a text weight, or layer:A / first:A (the weight whose key reach is A, "
                         "per layer or set at the first edited layer and kept)")
    ap.add_argument("--grid", default="0,1,3,10,30,100", help="text weights solved per layer of every chain")
    ap.add_argument("--ppl-tokens", type=int, default=0, help="> 0: WikiText-2 PPL after every chain")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    base_hp = load_hparams(args.hparams)
    model, tok = load_model_and_tokenizer(str(base_hp.model_name), "cpu")
    cases, _ = drop_batch_forget_neighbours(sample_cases(list(load_cases(args.data, path=args.data_path)),
                                                         args.n, args.seed))
    requests = [dict(c.request) for c in cases]
    ppl_text = str(default_ppl_text())
    result: Dict[str, Any] = {"hparams": args.hparams, "data_path": args.data_path, "n": len(cases), "seed": args.seed,
                              "case_ids": [c.case_id for c in cases], "chains": {}}
    if args.ppl_tokens:
        result["base_ppl"] = perplexity(model, tok, ppl_text, args.ppl_tokens)
    moments = batched_statistics(model, tok, base_hp, base_hp.mom2_dataset)
    started = time.perf_counter()
    targets = neutral_targets(model, tok, requests, base_hp)
    result["seconds_targets"] = time.perf_counter() - started
    recorder = Recorder([float(w) for w in args.grid.split(",")])
    pipeline.value_targets = recorder.value_targets
    out = Path(args.out)
    for w in args.chain:
        rule = w if ":" in w else ""
        hp = dataclasses.replace(base_hp, **{TEXT_WEIGHT_KEY: 0.0 if rule else float(w)})
        recorder.rows = {}
        started = time.perf_counter()
        weights, report = run_layerwise_edit(model, tok, requests, hp, recorder.solver(hp, rule),
                                             second_moments=moments, progress=False, targets=targets)
        try:
            chain: Dict[str, Any] = dict(still_answered=len(report.still_answered),
                                         layer_change_norm=report.layer_change_norm)
            if args.ppl_tokens:
                chain["ppl"] = perplexity(model, tok, ppl_text, args.ppl_tokens)
        finally:
            restore_weights(model, weights)
        chain["layers"] = {str(k): v for k, v in recorder.rows.items()}
        chain["seconds"] = time.perf_counter() - started
        result["chains"][w if rule else str(float(w))] = chain
        LOG.info("w %s: still answered %d of %d, ppl %s; rule w %s; m %s; R(10) %s", w, chain["still_answered"],
                 len(cases), chain.get("ppl"), [round(r.get("rule_w", -1), 3) for r in recorder.rows.values()],
                 [round(r["m"], 3) for r in recorder.rows.values()],
                 [round(r["R"]["10.0"], 3) for r in recorder.rows.values()])
        out.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
