"""Where the robust YAML's perplexity cost comes from: split by edited layer, by WikiText token, by fact.

The robust edit (``hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml`` as the bench's retain-aware row,
``ZeroUnlearn-GD+R``) of one half of the cached known CounterFact cases (``--half tune``: the same selection,
sample, neighbour filter and retain draw as ``benchmarks/deep/audit_variants.py --bench --half tune --n 40 --seeds 1
--retain same-answer:10``; the case ids and retain set are checked against ``--check`` when given) is made once; its
per-layer weight changes ``dW_l = W'_l - W_l`` (parameter layout ``[d_model, d_ff]``) are kept and the bench's
perplexity (the first ``--ppl-tokens`` tokens of the embedded WikiText-2 test split, windows of 512, as
:func:`zerounlearn_editor.evaluation.perplexity.perplexity`) is measured per token with

* ``full``: the edit as made (``W'`` at every layer);
* ``only_L``: ``W'`` at layer ``L`` alone, the other layers unedited;
* ``without_L``: ``W'`` at every layer but ``L``;
* ``half``: ``W + 0.5 dW`` at every layer.

Per layer it also records ``|dW_l| / |W_l|`` (Frobenius) and the change's share on the text statistics,
``tr(dW C0 dW^T) / tr(W C0 W^T)`` (``C0`` the edit's own second moment of the layer's keys), and per fact the norm of
the residual change the edit writes (``|z - h|`` at the last edited layer, read before the first layer's solve).

``--phase subsets --split answer|residual`` edits two halves of the facts (facts sharing an answer with another fact
of the batch against the others, or the 20 with the largest residual norm of the ``layers`` phase's JSON against
the rest), each with the whole retain set, and measures the same per-token perplexity for each.

``--phase scale`` makes the edit once and measures, for ``W + s dW`` at every layer (``s`` of ``--scales``), the
perplexity and the bench's Eff / Gen / Spe (:func:`~zerounlearn_editor.harness.case_scoring.probe_metrics`), and
the Eff / Gen / Spe of the edit with each layer left out.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=. python benchmarks/deep/ppl_split.py --phase layers \\
        --out benchmarks/results/audit/robust_ppl_split \\
        --check benchmarks/results/audit/robust_kr_bench_tune_n40/seed_1.json
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import torch

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.engine import pipeline
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.perplexity import (
    leading_token_ids,
    perplexity,
    plan_windows,
    read_text,
    scored_windows,
)
from zerounlearn_editor.harness.case_scoring import probe_metrics, score_cases
from zerounlearn_editor.harness.method_rows import default_registry
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours, neighbours_naming_forgotten_subjects
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint, draw_retain, parse_retain_spec
from zerounlearn_editor.harness.run_setup import load_model, prepare_run, setup_methods
from zerounlearn_editor.support.files import write_json_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from audit_variants import DEFAULT_HPARAMS, half_of  # noqa: E402
from known_cases import add_variants, cached_known_selection  # noqa: E402

LOG = logging.getLogger("ppl_split")
ROBUST = "hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml"
TOP_TOKENS = 40


def token_nll(model: torch.nn.Module, tok: Any, ids: Sequence[int], window: int = 512, stride: int = 512,
              batch_size: int = 4) -> torch.Tensor:
    """Per-token NLL ``[len(ids)]`` (float64; NaN at positions no window scores: the first) over the windows of
    :func:`~zerounlearn_editor.evaluation.perplexity.scored_windows`, the ones ``perplexity_of_ids`` sums, so that
    ``exp(nanmean)`` is its perplexity up to the summation order."""
    out = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    with eval_mode(model):
        for w, step_logits, targets in scored_windows(model, tok, list(ids), window, stride, batch_size):
            nll = torch.nn.functional.cross_entropy(step_logits, targets, reduction="none")
            out[w.score_from:w.end] = nll.double()
    return out


def ppl_of(nll: torch.Tensor) -> float:
    """``exp`` of the mean of the scored positions of ``nll`` ``[T]``."""
    return math.exp(float(nll[~nll.isnan()].mean()))


def delta_summary(base: torch.Tensor, nll: torch.Tensor, ids: Sequence[int], tok: Any, answer_ids: set,
                  n_windows: int, window: int = 512, top: int = TOP_TOKENS) -> Dict[str, Any]:
    """How the added NLL ``nll - base`` (``[T]`` each) is spread over the tokens: total, the share of the largest
    1/5/10% positions, per window, at positions whose token is an answer's first token, and the ``top`` positions
    (token, the 8 tokens before it, NLL before and after)."""
    scored = ~base.isnan()
    delta = (nll - base).masked_fill(~scored, 0.0)
    total = float(delta.sum())
    order = torch.argsort(delta, descending=True)
    count = int(scored.sum())
    shares = {f"top_{p}pct": float(delta[order[: max(1, count * p // 100)]].sum()) / total if total else None
              for p in (1, 5, 10)}
    positive = float(delta.clamp(min=0).sum())
    shares.update({f"top_{p}pct_of_positive": float(delta[order[: max(1, count * p // 100)]].sum()) / positive
                   if positive else None for p in (1, 5, 10)})
    is_answer = torch.tensor([i in answer_ids for i in ids])
    per_window = []
    for k in range(n_windows):
        sl = slice(k * window, min((k + 1) * window, len(ids)))
        per_window.append(round(float(delta[sl].sum()), 4))
    rows = []
    for pos in order[:top].tolist():
        rows.append({
            "position": pos,
            "token": tok.decode([ids[pos]]),
            "before": tok.decode(ids[max(0, pos - 8):pos]),
            "nll_base": round(float(base[pos]), 4),
            "nll_edit": round(float(nll[pos]), 4),
            "delta": round(float(delta[pos]), 4),
        })
    by_token: Dict[str, float] = collections.defaultdict(float)
    by_count: Dict[str, int] = collections.defaultdict(int)
    for pos in range(len(ids)):
        if scored[pos]:
            by_token[tok.decode([ids[pos]])] += float(delta[pos])
            by_count[tok.decode([ids[pos]])] += 1
    token_rows = sorted(by_token.items(), key=lambda kv: -kv[1])[:top]
    return {
        "added_nll": total,
        "added_nll_positive": positive,
        "scored_tokens": count,
        "share_of_added": shares,
        "added_at_answer_tokens": float(delta[is_answer].sum()),
        "answer_token_positions": int(is_answer.sum()),
        "per_window_added": per_window,
        "top_positions": rows,
        "top_token_types": [{"token": t, "added": round(v, 4), "count": by_count[t]} for t, v in token_rows],
    }


class ResidualRecorder:
    """Wraps :func:`zerounlearn_editor.engine.pipeline._layer_problem` to record, per edited layer, the norm of
    each forget fact's full residual change ``|z - h|`` (``h`` the hidden state at the last edited layer read
    before that layer's solve); the wrapped function's result is returned unchanged."""

    def __init__(self) -> None:
        self.norms: Dict[int, List[float]] = {}
        self._original = pipeline._layer_problem

    def __enter__(self) -> "ResidualRecorder":
        original = self._original

        def wrapped(plan, layer, position, module, readout, targets, *args, **kwargs):
            n = len(plan.forget)
            diff = (targets.z - readout.hidden[:n]).double()
            self.norms[int(layer)] = [round(float(v), 4) for v in diff.norm(dim=-1)]
            return original(plan, layer, position, module, readout, targets, *args, **kwargs)

        pipeline._layer_problem = wrapped
        return self

    def __exit__(self, *exc) -> None:
        pipeline._layer_problem = self._original


def text_share(dW: torch.Tensor, W: torch.Tensor, C0: torch.Tensor) -> float:
    """``tr(dW C0 dW^T) / tr(W C0 W^T)`` for ``dW``, ``W`` ``[d_out, d_in]`` and ``C0`` ``[d_in, d_in]``: the
    change's mean squared output on the text keys against the weight's."""
    dW, W, C0 = dW.double(), W.double(), C0.double()
    return float(((dW @ C0) * dW).sum() / ((W @ C0) * W).sum())


def setup(args) -> Tuple[Any, Any, list, list, Any, Any]:
    """Model, tokenizer, the half's sampled cases, the retain set, the prepared robust method and its bank."""
    registry = default_registry()
    add_variants(registry, [f"robust={args.yaml}"], "ZeroUnlearn-GD+R")
    methods = setup_methods(["robust"], {}, DEFAULT_HPARAMS, registry)
    all_cases = load_cases(args.data)
    pool = list(all_cases)
    model, tok = load_model(None, str(methods.lookup.main.model_name), "cpu", None)
    select = half_of(cached_known_selection(Path(args.known_cache)), args.half)
    known = select(model, tok, all_cases, None, min_accuracy=1.0)
    cases, dropped = drop_batch_forget_neighbours(sample_cases(known, args.n, args.seed))
    retain = draw_retain(parse_retain_spec(args.retain), cases, pool, args.seed)
    check_retain_disjoint(retain, cases)
    if args.check:
        stored = json.loads(Path(args.check).read_text())
        ids = [c.case_id for c in cases]
        if stored["case_ids"] != ids or stored["retain"] != retain:
            raise SystemExit(f"{args.check}: other case ids or retain set than this draw")
        LOG.info("case ids and retain set (%d) equal %s's", len(retain), args.check)
    run = prepare_run(methods, model, tok, Path(args.out), ["robust"], False)
    return model, tok, cases, retain, run.prepared["robust"], run.bank


def edit(model, tok, method, bank, cases, retain) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor],
                                                            Dict[str, Any], Dict[int, List[float]], float]:
    """The robust edit of ``cases``: (original weights, edited weights, the method's details, residual norms by
    layer, seconds); the model is left edited."""
    start = time.perf_counter()
    with ResidualRecorder() as recorder:
        outcome = method.edit(model, tok, [dict(c.request) for c in cases], bank, retain=[dict(r) for r in retain])
    seconds = time.perf_counter() - start
    params = dict(model.named_parameters())
    edited = {name: params[name].detach().clone() for name in outcome.weights_copy}
    return outcome.weights_copy, edited, outcome.details, recorder.norms, seconds


def layer_of(name: str) -> int:
    """The layer index of a parameter name ``model.layers.<L>.mlp.down_proj.weight``."""
    return int(name.split(".")[2])


def run_layers(args, model, tok, cases, retain, method, bank, ids, answer_ids, base) -> Dict[str, Any]:
    """The ``layers`` phase (module docstring)."""
    text = str(default_ppl_text())
    original, edited, details, residuals, seconds = edit(model, tok, method, bank, cases, retain)
    names = sorted(original, key=layer_of)
    n_windows = len(plan_windows(len(ids), 512, 512))
    result: Dict[str, Any] = {"edit_seconds": seconds, "details": details, "residual_norms": residuals}
    full_ppl = perplexity(model, tok, text, max_tokens=args.ppl_tokens)
    full = token_nll(model, tok, ids)
    LOG.info("full edit: bench perplexity %.4f, per-token %.4f", full_ppl, ppl_of(full))
    result["full_ppl_bench"] = full_ppl
    template = method.stats_module_tmp
    layers = {}
    for name in names:
        layer = layer_of(name)
        dW = edited[name] - original[name]
        C0 = bank[template][layer].moment()
        layers[str(layer)] = {
            "rel_change": float(dW.double().norm() / original[name].double().norm()),
            "text_share": text_share(dW, original[name], C0),
            "dW_norm": float(dW.double().norm()),
        }
    result["layers"] = layers
    conditions: Dict[str, Dict[str, torch.Tensor]] = {"full": edited}
    for name in names:
        layer = layer_of(name)
        conditions[f"only_{layer}"] = {**original, name: edited[name]}
        conditions[f"without_{layer}"] = {**edited, name: original[name]}
    if args.half_scale:
        conditions["half"] = {n: original[n] + 0.5 * (edited[n] - original[n]) for n in names}
    rows = {}
    nlls = {"full": full}
    for label, weights in conditions.items():
        if label != "full":
            restore_weights(model, weights)
            nlls[label] = token_nll(model, tok, ids)
        summary = delta_summary(base, nlls[label], ids, tok, answer_ids, n_windows,
                                top=TOP_TOKENS if label == "full" else 10)
        rows[label] = {"ppl": ppl_of(nlls[label]), **summary}
        LOG.info("%s: PPL %.4f (%+.2f%%)", label, rows[label]["ppl"], 100 * (rows[label]["ppl"] / ppl_of(base) - 1))
        write_json_atomic(Path(args.out) / "layers.json", {**result, "conditions": rows})
    top_full = [r["position"] for r in rows["full"]["top_positions"]]
    for label in rows:  # the full edit's top positions: what each condition adds there
        rows[label]["added_at_full_top"] = float((nlls[label] - base)[top_full].sum())
    restore_weights(model, original)
    result["conditions"] = rows
    result["per_token"] = {"base": [round(float(v), 5) for v in base], "full": [round(float(v), 5) for v in full]}
    return result


def run_subsets(args, model, tok, cases, retain, method, bank, ids, answer_ids, base) -> Dict[str, Any]:
    """The ``subsets`` phase (module docstring)."""
    answers = [c.request.get("ground_truth") or c.request.get("answer") for c in cases]
    if args.split == "answer":
        counts = collections.Counter(answers)
        groups = {"shared_answer": [i for i, a in enumerate(answers) if counts[a] > 1],
                  "own_answer": [i for i, a in enumerate(answers) if counts[a] == 1]}
    else:
        stored = json.loads((Path(args.out) / "layers.json").read_text())
        first = min(stored["residual_norms"], key=int)
        norms = stored["residual_norms"][first]
        order = sorted(range(len(cases)), key=lambda i: -norms[i])
        half = len(cases) // 2
        groups = {"residual_top": sorted(order[:half]), "residual_rest": sorted(order[half:])}
    n_windows = len(plan_windows(len(ids), 512, 512))
    result: Dict[str, Any] = {"split": args.split, "groups": {}}
    for label, members in groups.items():
        subset = [cases[i] for i in members]
        original, _, details, residuals, seconds = edit(model, tok, method, bank, subset, retain)
        nll = token_nll(model, tok, ids)
        restore_weights(model, original)
        result["groups"][label] = {
            "case_ids": [c.case_id for c in subset],
            "answers": [answers[i] for i in members],
            "ppl": ppl_of(nll),
            "edit_seconds": seconds,
            "details": details,
            "residual_norms": residuals,
            **delta_summary(base, nll, ids, tok, answer_ids, n_windows, top=20),
        }
        LOG.info("%s (%d facts): PPL %.4f", label, len(subset), result["groups"][label]["ppl"])
        write_json_atomic(Path(args.out) / f"subsets_{args.split}.json", result)
    return result


def scores_row(model, tok, cases, pre, named) -> Dict[str, Any]:
    """The bench's Eff / Gen / Spe (x100) of the model's current state and the forget prompts still answered
    (forget-probe token accuracy 1), as :func:`zerounlearn_editor.harness.case_scoring.probe_metrics` scores them."""
    post = score_cases(model, tok, cases, 32)
    metrics = probe_metrics(post, pre, named)
    answered = [c.case_id for c, s in zip(cases, post) if min(s.forget["acc"]) >= 1.0]
    return {"eff": metrics["eff"], "gen": metrics["gen"], "spe": metrics["spe"], "spe_agree": metrics["spe_agree"],
            "eff_prob": metrics["eff_prob"], "answered": answered}


def run_scale(args, model, tok, cases, retain, method, bank, ids, answer_ids, base) -> Dict[str, Any]:
    """The ``scale`` phase: the edit once, then ``W + s dW`` at every layer for each ``s`` of ``--scales``
    (perplexity, Eff / Gen / Spe), and each layer left out (Eff / Gen / Spe only)."""
    pre = score_cases(model, tok, cases, 32)
    named = neighbours_naming_forgotten_subjects(cases)
    result: Dict[str, Any] = {"base_scores": scores_row(model, tok, cases, pre, named)}
    original, edited, details, residuals, seconds = edit(model, tok, method, bank, cases, retain)
    names = sorted(original, key=layer_of)
    result.update(edit_seconds=seconds, details=details, scales={}, without={})
    for scale in [float(x) for x in args.scales.split(",")]:
        weights = edited if scale == 1.0 else {n: original[n] + scale * (edited[n] - original[n]) for n in names}
        restore_weights(model, weights)
        row = {"ppl": ppl_of(token_nll(model, tok, ids)), **scores_row(model, tok, cases, pre, named)}
        result["scales"][str(scale)] = row
        LOG.info("scale %.2f: PPL %.4f Eff %.1f Spe %.1f answered %d", scale, row["ppl"], row["eff"], row["spe"],
                 len(row["answered"]))
        write_json_atomic(Path(args.out) / "scale.json", result)
    for name in names:
        restore_weights(model, {**edited, name: original[name]})
        row = scores_row(model, tok, cases, pre, named)
        result["without"][str(layer_of(name))] = row
        LOG.info("without %d: Eff %.1f Spe %.1f answered %d", layer_of(name), row["eff"], row["spe"],
                 len(row["answered"]))
        write_json_atomic(Path(args.out) / "scale.json", result)
    restore_weights(model, original)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", choices=("layers", "subsets", "scale"), default="layers")
    ap.add_argument("--split", choices=("answer", "residual"), default="answer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--yaml", default=ROBUST)
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--known-cache", default="benchmarks/results/deep/known_counterfact_easyedit.json")
    ap.add_argument("--half", choices=("tune", "report"), default="tune")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--retain", default="same-answer:10")
    ap.add_argument("--ppl-tokens", type=int, default=5000)
    ap.add_argument("--scales", default="0.5,0.7,0.8,0.85,0.9,1.0", help="scale phase: the factors s of W + s dW")
    ap.add_argument("--half-scale", action="store_true", help="layers phase: also W + 0.5 dW at every layer")
    ap.add_argument("--check", default=None, help="a bench seed JSON whose case ids and retain set must be equal")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    model, tok, cases, retain, method, bank = setup(args)
    ids = leading_token_ids(tok, read_text(str(default_ppl_text())), args.ppl_tokens)
    answer_ids = {tok(" " + str(c.request.get("ground_truth")))["input_ids"][0] for c in cases}
    base = token_nll(model, tok, ids)
    LOG.info("base: per-token perplexity %.4f on %d tokens", ppl_of(base), len(ids))
    run = {"layers": run_layers, "subsets": run_subsets, "scale": run_scale}[args.phase]
    result = run(args, model, tok, cases, retain, method, bank, ids, answer_ids, base)
    result.update(base_ppl=ppl_of(base), tokens=len(ids), case_ids=[c.case_id for c in cases],
                  answers=[c.request.get("ground_truth") for c in cases], retain_count=len(retain),
                  settings={k: v for k, v in vars(args).items()})
    name = {"layers": "layers.json", "subsets": f"subsets_{args.split}.json", "scale": "scale.json"}[args.phase]
    write_json_atomic(Path(args.out) / name, result)


if __name__ == "__main__":
    main()
