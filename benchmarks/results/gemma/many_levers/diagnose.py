"""Issue 48, RESULTS 12.16: which of a ``--many`` batch's facts take target steps, and what they cost.

Reads the targets a ``bench-scale batch`` run cached (``--targets``: its ``<out>/targets``; same YAML, data, seed
and n, so the same cases and the same files), scores the unedited model, and writes per fact: known (forget-prompt
token accuracy >= 0.5), target steps and final loss, the forget prompt's first-answer-token probability and rank
and the whole answer's probability (teacher-forced). Then edits subsets of the facts with the YAML (``--subsets``:
``known``, ``stepped``, ``unknown_stepped``, ``all``), each scored on all n cases (so known Eff and Spe are over
the same cases as the batch row) plus perplexity, weights restored after each.

Usage (from the worktree root, after ``run_train.sh`` wrote the baseline's targets)::

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data nice -n 5 \\
      python benchmarks/results/gemma/many_levers/diagnose.py \\
      --hparams benchmarks/results/gemma/many_levers/gemma-many-th10x-tw100.yaml \\
      --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json --n 300 --seed 1 \\
      --targets benchmarks/results/gemma/many_levers/train --out benchmarks/results/gemma/many_levers/diagnose
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from statistics import fmean, median
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.engine.targets import NeutralTargets
from zerounlearn_editor.evaluation.batching import encode_probe
from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.harness.case_scoring import score_cases
from zerounlearn_editor.harness.scale_cases import draw_cases
from zerounlearn_editor.harness.scale_config import ScaleConfig
from zerounlearn_editor.harness.scale_metrics import known_mask, scale_metrics
from zerounlearn_editor.harness.scale_setup import edit_once, load_setup, perplexity, prepare_run
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.methods.registry import load_method
from zerounlearn_editor.support.files import write_json_atomic

LOG = logging.getLogger("diagnose")


@torch.no_grad()
def first_token_stats(model: Any, tok: Any, probe: Any) -> Tuple[float, int]:
    """``(p, rank)`` of ``probe``'s first answer token after its prompt (rank 0 = the argmax); one forward
    ``[1, T]``."""
    encoded = encode_probe(tok, probe)
    ids = torch.tensor([encoded.input_ids[:encoded.answer_start]])
    logits = model(input_ids=ids).logits[0, -1].float()  # [vocab]
    token = encoded.input_ids[encoded.answer_start]
    probs = logits.softmax(-1)
    rank = int((logits > logits[token]).sum())
    return float(probs[token]), rank


def forget_scores(model: Any, tok: Any, cases: Sequence[Any]) -> List[CaseScores]:
    """:class:`CaseScores` of ``cases`` with only the forget probes scored (the other probe sets empty)."""
    flat = [probe for case in cases for probe in case.forget]
    scores = evaluate_probes(model, tok, flat)
    out, start = [], 0
    empty = evaluate_probes(model, tok, [])
    for case in cases:
        stop = start + len(case.forget)
        part = {key: values[start:stop] for key, values in scores.items()}
        out.append(CaseScores(forget=part, paraphrase=empty, neighbour=empty))  # type: ignore[arg-type]
        start = stop
    return out


def cached_steps(cache: TargetCache, model: Any, hp: Any, requests: List[Dict[str, Any]],
                 chunk: int = 50) -> Optional[List[int]]:
    """Target steps per request ``[n]`` from ``cache``'s files for ``hp``, or ``None`` when a chunk is not cached
    (nothing is optimised here)."""
    from safetensors.torch import load_file

    steps: List[int] = []
    for start in range(0, len(requests), chunk):
        path = cache.path(model, hp, requests[start:start + chunk])
        if not path.exists():
            LOG.info("no cached targets at %s: steps not read", path)
            return None
        steps += [int(s) for s in load_file(str(path))["steps"].tolist()]
    return steps


def subset_targets(targets: NeutralTargets, keep: Sequence[int]) -> NeutralTargets:
    """The rows ``keep`` of ``targets`` (``z``, ``h0`` ``[k, d_model]``, ``nll`` ``[k]``)."""
    index = torch.tensor(list(keep), dtype=torch.long)
    return NeutralTargets(z=targets.z[index], h0=targets.h0[index], nll=targets.nll[index],
                          steps_run=[targets.steps_run[i] for i in keep])


def group_summary(facts: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Count, steps and first-token probability / rank quantiles of ``facts`` (dicts of :func:`main`)."""
    if not facts:
        return {"count": 0}
    p = sorted(f["p_first"] for f in facts)
    ranks = sorted(f["rank_first"] for f in facts)

    def q(values: List[float], at: float) -> float:
        return values[min(len(values) - 1, int(at * len(values)))]
    return {
        "count": len(facts), "steps_mean": fmean(f["steps"] for f in facts),
        "p_first_q10_q50_q90": [q(p, .1), median(p), q(p, .9)],
        "p_seq_median": median(f["p_seq"] for f in facts),
        "rank_first_q10_q50_q90": [q(ranks, .1), median(ranks), q(ranks, .9)],
        "rank0_share": sum(r == 0 for r in ranks) / len(ranks),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--targets", required=True, help="the bench-scale run's --out (its targets/ cache)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--subsets", default="known,unknown_stepped,stepped")
    parser.add_argument("--other-hparams", action="append", default=[],
                        help="YAMLs whose cached target steps (same --targets) are read per fact, if cached")
    parser.add_argument("--ppl-tokens", type=int, default=5000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ScaleConfig(hparams=[args.hparams], data=args.data, seeds=[args.seed], out=args.targets,
                         ns=[args.n], ppl_tokens=args.ppl_tokens)
    run = prepare_run(config, "no_such_file_*.json")
    setup = load_setup(config, run.hps)
    hp = run.hps[0]
    cases, _ = draw_cases(config, run, args.n, args.seed, lambda: setup)
    requests = [dict(c.request) for c in cases]
    subsets = [name for name in args.subsets.split(",") if name]
    if subsets:  # every probe, for the edits' Eff / Spe
        pre = score_cases(setup.model, setup.tok, cases)
    else:  # the forget probes only: what ``known`` and the per-fact columns read
        pre = forget_scores(setup.model, setup.tok, cases)
    known = known_mask(pre)
    cache = TargetCache(Path(args.targets) / "targets", setup.fingerprint)
    targets, seconds, costs = cache.get(setup.model, setup.tok, hp, requests, 50)
    if costs:
        LOG.warning("%d target chunk(s) were not cached and were optimised here (%.0f s)", len(costs), seconds)
    other_steps = {path: cached_steps(cache, setup.model, load_method(path)[0], requests)
                   for path in args.other_hparams}
    facts = []
    for i, (case, scores) in enumerate(zip(cases, pre)):
        probe = case.forget[0]
        p_first, rank = first_token_stats(setup.model, setup.tok, probe)
        facts.append({"case_id": case.case_id, "known": known[i], "steps": targets.steps_run[i],
                      "nll_final": float(targets.nll[i]), "p_first": p_first, "rank_first": rank,
                      "p_seq": scores.forget["seq_prob"][0], "first_acc": scores.forget["first_acc"][0],
                      "steps_other": {Path(k).stem: (v[i] if v else None) for k, v in other_steps.items()}})
    groups = {
        "known_stepped": [f for f in facts if f["known"] and f["steps"] > 0],
        "known_unstepped": [f for f in facts if f["known"] and f["steps"] == 0],
        "unknown_stepped": [f for f in facts if not f["known"] and f["steps"] > 0],
        "unknown_unstepped": [f for f in facts if not f["known"] and f["steps"] == 0],
    }
    summary = {name: group_summary(members) for name, members in groups.items()}
    for path, steps in other_steps.items():  # stepped facts per group under the other YAMLs' targets
        if steps:
            for name, members in groups.items():
                summary[name][f"stepped_{Path(path).stem}"] = sum(f["steps_other"][Path(path).stem] > 0
                                                                  for f in members)
    LOG.info("groups: %s", summary)
    base_ppl = perplexity(setup)
    result: Dict[str, Any] = {"hparams": args.hparams, "data": args.data, "n": args.n, "seed": args.seed,
                              "base_ppl": base_ppl, "groups": summary, "facts": facts, "edits": {}}
    out = Path(args.out)
    write_json_atomic(out / "diagnose.json", result)
    pick = {
        "known": [i for i, f in enumerate(facts) if f["known"]],
        "stepped": [i for i, f in enumerate(facts) if f["steps"] > 0],
        "unknown_stepped": [i for i, f in enumerate(facts) if not f["known"] and f["steps"] > 0],
        "known_or_stepped_p_first_ge_05": [i for i, f in enumerate(facts) if f["known"] or
                                           (f["steps"] > 0 and f["p_first"] >= .05)],
        "all": list(range(len(facts))),
    }
    for name in subsets:
        keep = pick[name]
        if not keep:
            LOG.info("subset %s: no facts, skipped", name)
            continue
        LOG.info("edit of subset %s: %d facts", name, len(keep))
        weights, details, cost = edit_once(setup, hp, [requests[i] for i in keep], subset_targets(targets, keep))
        try:
            post = score_cases(setup.model, setup.tok, cases)
            ppl = perplexity(setup)
        finally:
            restore_weights(setup.model, weights)
        setup.fingerprint.verify(setup.model, f"after subset {name}")
        metrics = scale_metrics(post, pre, known)
        base = scale_metrics(pre, pre, known)
        result["edits"][name] = {"facts": len(keep), "base": dict(base, ppl=base_ppl),
                                 "metrics": dict(metrics, ppl=ppl), "details": details, "edit_seconds": cost.seconds}
        LOG.info("subset %s: known Eff1 %.1f Spe %.2f (base %.2f) PPL %.2f (base %.2f) change %s", name,
                 metrics.get("eff_first_known", float("nan")), metrics["spe"], base["spe"], ppl, base_ppl,
                 details["layer_change_norm"])
        write_json_atomic(out / "diagnose.json", result)


if __name__ == "__main__":
    main()
