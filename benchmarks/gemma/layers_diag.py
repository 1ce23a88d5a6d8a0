"""Issue 48: why the first edited layer takes most of the weight change on Gemma-3-270m, and per-layer levers.

One process, one model load. On the bench's cases (``--data-path``, ``--n``, ``--seed``; the bench's own sampling,
neighbour drop and ``--retain`` draw, or ``--retain-from`` a bench seed JSON's stored set; a variant gets the retain
set only when it has a retain weight > 0) it scores the unedited model once, then for each ``--variant`` runs the real
edit (``run_layerwise_edit`` with ZeroUnlearn-GD's solve), records per edited layer what the solve saw, scores the
edited model (answered = first-token Eff, Spe, Spe agree, PPL on ``--ppl-tokens`` WikiText-2 tokens: ``ppl`` with
every window opening with BOS where the tokenizer opens the text with it, ``ppl_as_tokenized`` without) and restores
the weights. Variants whose target settings match reuse the first one's neutral targets (same last layer, same
target keys): the target stage runs once per distinct setting.

Per edited layer (means over the n forget facts at the subject's last token):

* ``w_norm``: ``|W|_F``; ``key_norm``: ``|k|``; ``key_null_fraction``: ``|U0^T k| / |k|`` (the part of the key the
  null-space update can use); ``null_rank``: columns of ``U0``; ``c0_mean`` / ``c0_median`` / ``c0_max``: the
  eigenvalues of the protected ``C0``;
* ``delta_norm``: the residual change asked of this layer (``(z - h) / layers left``); ``fv_norm``: ``|f(v)|``
  (what the MLP writes to the residual, after the post-feedforward norm); ``v_norm``: ``|v|`` (down_proj's output);
  ``dv_norm``: the value change the post-MLP map asks for; ``gain``: ``|f(v + dv) - f(v)| / |dv|`` (residual change
  per unit of down_proj output change); ``map_error``: ``|f(v + dv) - f(v) - delta| / |delta|``;
* after the solve: ``rel_change`` ``|dW| / |W|``; ``min_norm_change``: ``|dv| / |U0^T k|`` summed in quadrature
  over facts, over ``|W|`` (the smallest null-space update that writes every ``dv`` exactly, ignoring overlap);
  ``value_reached``: ``1 - |dW K_f - dv| / |dv|``; ``text_change``: ``sqrt(tr(dW C0 dW^T) / tr(W C0 W^T))``, the
  relative change of down_proj's output on the statistics' text (what the edit does to every other input).

Variant syntax (``--variant NAME:key=value,key=value``), keys are YAML keys or ``per_layer_norm=<quantity>`` /
``per_layer_threshold=c0_median``: the YAML's ``norm_weight`` / ``nullspace_threshold`` times the layer's median
``C0`` eigenvalue over the median of the edited layers' medians.

    PYTHONPATH=$PWD python benchmarks/gemma/layers_diag.py --hparams benchmarks/results/gemma/rules/gemma-rules.yaml \\
        --data-path benchmarks/results/gemma/n50/cf_train700_gemma_known.json --n 50 --seed 1 --ppl-tokens 4000 \\
        --variant "rules:" --variant "pl_norm:per_layer_norm=c0_median" --out diag.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from zerounlearn_editor.cli.common import load_hparams
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.engine import pipeline
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets, restore_weights, run_layerwise_edit
from zerounlearn_editor.engine.post_mlp import apply_post_mlp, value_targets
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.harness.bench_config import parse_retain_spec
from zerounlearn_editor.harness.case_scoring import probe_metrics, score_cases
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours, neighbours_naming_forgotten_subjects
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint, draw_retain
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver
from zerounlearn_editor.methods.zerounlearn_gd.repair import run_repair_rounds
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis, protected_covariance
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("layers_diag")
TARGET_KEYS = ("layers", "v_loss_layer", "v_lr", "v_num_grad_steps", "clamp_norm_factor", "v_early_stop_loss",
               "kl_factor", "v_weight_decay", "target_objective", "context_template_count",
               "context_template_length", "neutral_target")


def parse_variant(text: str):
    name, _, rest = text.partition(":")
    settings: Dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, _, value = item.partition("=")
        if key == "layers":
            settings[key] = [int(x) for x in value.split("+")]
        else:
            try:
                settings[key] = json.loads(value)
            except json.JSONDecodeError:
                settings[key] = value
    return name, settings


def per_case_rows(case_ids: Sequence[str], scores: Sequence[Any]) -> List[Dict[str, Any]]:
    """One row per case: ``answered`` (first answer token still the argmax, the script's count) and the neighbour
    probes' token accuracies ``neighbour_acc`` (Spe is their case mean), so seeds can be pooled or split by case."""
    return [dict(case_id=cid, answered=bool(s.forget["first_acc"][0] >= 1.0),
                 neighbour_acc=[float(a) for a in s.neighbour["acc"]]) for cid, s in zip(case_ids, scores)]


def variant_retain(hp: Any, retain: List[Dict[str, str]]) -> Optional[List[Dict[str, str]]]:
    """The retain set a variant's edit gets: ``retain`` when one of ``hp``'s retain weights
    (``hp.retain_weights()``) is > 0, else None (the edit refuses a retain set it would ignore), so variants with
    and without a retain term share one run, one case draw and one target stage."""
    return retain if retain and any(float(v) > 0 for v in hp.retain_weights().values()) else None


class Recorder:
    """Wraps ``pipeline.value_targets`` and the solve to record per-layer quantities (module doc)."""

    def __init__(self):
        self.rows: Dict[int, Dict[str, float]] = {}
        self.pending: Dict[str, Any] = {}

    def value_targets(self, W, K_f, delta, spec, bias=None):
        M_n = value_targets(W, K_f, delta, spec, bias)
        v = W @ K_f + (0 if bias is None else bias.to(W)[:, None])
        dv = M_n - W @ K_f
        reached = apply_post_mlp(spec, v + dv) - apply_post_mlp(spec, v)
        dn = dv.norm(dim=0).clamp_min(1e-30)
        self.pending = dict(
            delta_norm=float(delta.norm(dim=0).mean()), v_norm=float(v.norm(dim=0).mean()),
            fv_norm=float(apply_post_mlp(spec, v).norm(dim=0).mean()), dv_norm=float(dv.norm(dim=0).mean()),
            gain=float((reached.norm(dim=0) / dn).mean()),
            map_error=float(((reached - delta).norm(dim=0) / delta.norm(dim=0).clamp_min(1e-30)).mean()),
        )
        self.dv = dv
        return M_n

    def solver(self, hparams, scales):
        # one solve per edit: a `nullspace_text_weight: {key_reach: A}` weight is set at the first layer and kept;
        # a per-layer knob builds a solve of its own for its layers, which would set the weight again there
        if scales and isinstance(hparams.nullspace_text_weight, dict):
            raise SystemExit("layers_diag.py: a per_layer_* knob cannot be combined with nullspace_text_weight: "
                             "{key_reach: A} (each scaled layer would choose its own weight)")
        edit_solve = zerounlearn_gd_solver(hparams)

        def solve(problem):
            hp = hparams
            if problem.layer in scales:
                hp = dataclasses.replace(hparams, **scales[problem.layer])
            new_W = (zerounlearn_gd_solver(hp) if problem.layer in scales else edit_solve)(problem)
            protected = protected_covariance(problem.C0, problem.K_r, hp.retain_nullspace_weight, problem.C_ctx,
                                             hp.context_nullspace_weight)
            U0, _ = nullspace_basis(protected, hp.nullspace_threshold)
            eig = torch.linalg.eigvalsh(0.5 * (protected + protected.t()))
            K, dW, W = problem.K_f, new_W - problem.W, problem.W
            kt = (U0.t() @ K).norm(dim=0)
            dv = self.dv
            row = dict(self.pending)
            row.update(
                w_norm=float(W.norm()), key_norm=float(K.norm(dim=0).mean()),
                key_ms=float(K.pow(2).mean()), key_null_fraction=float((kt / K.norm(dim=0)).mean()),
                null_rank=int(U0.shape[1]), c0_mean=float(eig.mean()), c0_median=float(eig.median()),
                c0_max=float(eig.max()), norm_weight=hp.norm_weight, nullspace_threshold=hp.nullspace_threshold,
                rel_change=float(dW.norm() / W.norm()),
                min_norm_change=float(((dv.norm(dim=0) / kt.clamp_min(1e-30)).pow(2).sum().sqrt()) / W.norm()),
                value_reached=float(1 - (dW @ K - dv).norm() / dv.norm().clamp_min(1e-30)),
                text_change=float(torch.sqrt(torch.trace(dW @ problem.C0 @ dW.t())
                                             / torch.trace(W @ problem.C0 @ W.t()))),
            )
            self.rows[problem.layer] = row
            return new_W
        return solve


def per_layer_scales(hp, settings, stats_cache):
    """``{layer: {key: value}}`` for ``per_layer_norm`` / ``per_layer_threshold`` (module doc)."""
    out: Dict[int, Dict[str, float]] = {}
    for knob, key in (("per_layer_norm", "norm_weight"), ("per_layer_threshold", "nullspace_threshold")):
        quantity = settings.get(knob)
        if not quantity:
            continue
        values = {l: stats_cache[(l, quantity)] for l in hp.layers}
        ref = statistics.median(values.values())
        for l in hp.layers:
            out.setdefault(l, {})[key] = getattr(hp, key) * values[l] / ref
    return out


def layer_quantities(model, tok, hp, quantity_cache):
    """The edited layers' statistics; their C0 medians into ``quantity_cache``."""
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset)
    for l in hp.layers:
        if (l, "c0_median") not in quantity_cache:
            C0 = moments[l].moment().double()
            quantity_cache[(l, "c0_median")] = float(torch.linalg.eigvalsh(0.5 * (C0 + C0.t())).median())
    return moments


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hparams", required=True)
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--data-path", required=True)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--retain", default=None)
    ap.add_argument("--retain-from", default=None, help="a bench seed JSON whose stored retain set to use")
    ap.add_argument("--ppl-tokens", type=int, default=4000)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    base_hp = load_hparams(args.hparams)
    model, tok = load_model_and_tokenizer(str(base_hp.model_name), "cpu")
    pool = load_cases(args.data, path=args.data_path)
    cases, dropped = drop_batch_forget_neighbours(sample_cases(list(pool), args.n, args.seed))
    requests = [dict(c.request) for c in cases]
    draw = parse_retain_spec(args.retain)
    retain = draw_retain(draw, cases, pool, args.seed) if draw else []
    if args.retain_from:
        stored = json.loads(Path(args.retain_from).read_text())
        if stored["case_ids"] != [c.case_id for c in cases]:
            raise SystemExit(f"{args.retain_from}: another case list than this run's")
        retain = list(stored["retain"])
        check_retain_disjoint(retain, cases)  # the stored set never names a scored subject or prompt
    named = neighbours_naming_forgotten_subjects(cases)
    ppl_text = str(default_ppl_text())
    pre = score_cases(model, tok, cases)
    result: Dict[str, Any] = {
        "hparams": args.hparams, "data_path": args.data_path, "n": len(cases), "seed": args.seed,
        "retain": args.retain_from or args.retain, "retain_count": len(retain), "case_ids": [c.case_id for c in cases],
        "base": dict(probe_metrics(pre, named=named), ppl=perplexity(model, tok, ppl_text, args.ppl_tokens),
                     ppl_as_tokenized=perplexity(model, tok, ppl_text, args.ppl_tokens, bos_windows=False)),
        "per_case": per_case_rows([c.case_id for c in cases], pre), "variants": {},
    }
    LOG.info("base: %s", result["base"])
    targets_cache: Dict[str, Any] = {}
    quantities: Dict[Any, float] = {}
    recorder = Recorder()
    pipeline.value_targets = recorder.value_targets  # record the value change the solve is given
    out = Path(args.out)
    for spec in args.variant:
        name, settings = parse_variant(spec)
        yaml_keys = {k: v for k, v in settings.items() if not k.startswith("per_layer")}
        hp = dataclasses.replace(base_hp, **yaml_keys)
        moments = layer_quantities(model, tok, hp, quantities)
        scales = per_layer_scales(hp, settings, quantities)
        tkey = json.dumps({k: getattr(hp, k) for k in TARGET_KEYS if k != "layers"} | {"last": hp.layers[-1]},
                          sort_keys=True, default=str)
        started = time.perf_counter()
        if tkey not in targets_cache:
            targets_cache[tkey] = neutral_targets(model, tok, requests, hp)
        t_targets = time.perf_counter() - started
        recorder.rows = {}
        used_retain = variant_retain(hp, retain)
        weights, report = run_layerwise_edit(model, tok, requests, hp, recorder.solver(hp, scales),
                                             second_moments=moments, progress=False, targets=targets_cache[tkey],
                                             retain=used_retain, answer_check=not hp.repair_rounds)
        if hp.repair_rounds:  # as apply_zerounlearn_gd_to_model: the rounds on the edited model (RESULTS 12.32);
            # their solves are the YAML's (not recorded: the layer rows stay the first edit's)
            if scales:
                raise SystemExit("layers_diag.py: a per_layer_* knob cannot be combined with repair_rounds")
            plan = pipeline.as_edit_plan(model, tok, requests, hp, used_retain)
            run_repair_rounds(model, tok, plan, lambda: zerounlearn_gd_solver(hp), hp.repair_rounds,
                              dict(second_moments=moments, progress=False, retain=used_retain), weights, report)
        try:
            post = score_cases(model, tok, cases)
            metrics = dict(probe_metrics(post, pre, named), ppl=perplexity(model, tok, ppl_text, args.ppl_tokens),
                           ppl_as_tokenized=perplexity(model, tok, ppl_text, args.ppl_tokens, bos_windows=False))
        finally:
            restore_weights(model, weights)
        metrics["answered_first_token"] = sum(1 for s in post if s.forget["first_acc"][0] >= 1.0)
        metrics["still_answered"] = len(report.still_answered)
        result["variants"][name] = dict(
            settings=settings, retain_count=len(used_retain or []), per_layer=scales, metrics=metrics,
            layers={str(k): v for k, v in recorder.rows.items()},
            layer_change_norm=report.layer_change_norm, per_case=per_case_rows(result["case_ids"], post),
            target_nll_mean=float(torch.as_tensor(report.target_nll).mean()),
            seconds=dict(targets=t_targets, edit=time.perf_counter() - started - t_targets),
        )
        LOG.info("%s: answered %d, Spe %.1f (base %.1f), PPL %.2f (base %.2f), change %s", name,
                 metrics["answered_first_token"], metrics["spe"], result["base"]["spe"], metrics["ppl"],
                 result["base"]["ppl"], {k: round(v, 3) for k, v in report.layer_change_norm.items()})
        out.write_text(json.dumps(result, indent=1, default=str))  # after every variant: a killed run keeps rows


if __name__ == "__main__":
    main()
