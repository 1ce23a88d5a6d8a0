"""Capacity at scale: why a many-fact ZeroUnlearn-GD edit of SmolLM2 leaves facts answered or breaks fluency,
and which levers help (issue 37, point 2). Resumable: every artefact is written atomically and skipped when
present.

Three steps, each its own process-safe command (one torch thread: ``OMP_NUM_THREADS=1``):

``prepare``  draws the known cases (unedited token accuracy >= 0.5 on the forget prompt) of a CounterFact file in
             a seeded order and optimises their neutral targets in chunks of 50 facts (requests are independent in
             the target loop, so chunks concatenate to the batch's targets). Targets depend only on the YAML's
             ``target_settings`` and the facts: the chunk folder is keyed by a hash of those settings.
``run``      one or more lever settings (``--grid`` JSON list, or flags) at ``--n`` facts: the first ``n`` prepared
             facts edited in one batch with the prepared targets; per edited layer the diagnostics of the solve
             (null-space rank ``r``, energy of ``K_f`` in the null space, the value residual the layer must carry
             and the part it carries, conditioning, relative weight change), then Eff / first-token Eff / Gen /
             Spe and WikiText-2 PPL (first ``--ppl-tokens`` tokens) and the fluency guard's reading. One JSON per
             (setting, n) under ``<dir>/runs/``.
``table``    a markdown table of the runs of a folder.

    python benchmarks/scale/capacity.py prepare --data ../shared/data/counterfact/counterfact_easyedit_train_9484.json \
        --n 1000 --dir benchmarks/results/scale/capacity/train_s0
    python benchmarks/scale/capacity.py run --dir benchmarks/results/scale/capacity/train_s0 --n 200 --name paper
    python benchmarks/scale/capacity.py table --dir benchmarks/results/scale/capacity/train_s0
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import time
from pathlib import Path
from statistics import fmean
from typing import Any, Dict, List, Optional, Sequence

import torch

from zerounlearn_editor import ZeroUnlearnGDHyperParams, restore_weights
from zerounlearn_editor.data import load_cases
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.engine.pipeline import (
    LayerProblem,
    batched_statistics,
    neutral_targets,
    run_layerwise_edit,
    target_settings,
)
from zerounlearn_editor.engine.targets import NeutralTargets
from zerounlearn_editor.evaluation import evaluate_probes, perplexity
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis, protected_covariance
from zerounlearn_editor.support.files import read_json, write_bytes_atomic, write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
from zerounlearn_editor.support.resources import hparams_path

LOG = logging.getLogger("capacity")
CHUNK = 50
SCAN_BLOCK = 256


def _settings_key(model, hp: ZeroUnlearnGDHyperParams) -> str:
    blob = json.dumps(target_settings(model, hp), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _load_hp(yaml: Optional[str]) -> ZeroUnlearnGDHyperParams:
    return ZeroUnlearnGDHyperParams.from_hparams(yaml or hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct"))


def prepare(args) -> None:
    """Known cases in a seeded order (``cases.json``), then their targets chunk by chunk."""
    out = Path(args.dir)
    hp = _load_hp(args.yaml)
    model, tok = load_model_and_tokenizer(hp.model_name)
    cases = load_cases(args.data)
    order = list(range(len(cases)))
    random.Random(args.seed).shuffle(order)
    index_path = out / "cases.json"
    state = read_json(index_path) if index_path.exists() else {"data": str(args.data), "seed": args.seed,
                                                                 "scanned": 0, "known": []}
    from safetensors.torch import save as st_save

    from zerounlearn_editor.evaluation import select_known_cases

    tdir = out / f"targets_{_settings_key(model, hp)}"
    tdir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(tdir / "settings.json", target_settings(model, hp))
    t0 = time.perf_counter()
    for start in range(0, args.n, CHUNK):
        # scan just far enough for this chunk, so the first chunks' targets come early
        while len(state["known"]) < min(args.n, start + CHUNK) and state["scanned"] < len(order):
            block = order[state["scanned"]: state["scanned"] + SCAN_BLOCK]
            chosen = select_known_cases(model, tok, [cases[i] for i in block], None, args.min_accuracy)
            ids = {c.case_id for c in chosen}
            state["known"] += [i for i in block if cases[i].case_id in ids]
            state["scanned"] += len(block)
            write_json_atomic(index_path, state)
            LOG.info("scanned %d / %d records: %d known (%.0f s)", state["scanned"], len(order), len(state["known"]),
                     time.perf_counter() - t0)
        known = state["known"][start: min(args.n, start + CHUNK)]
        path = tdir / f"chunk_{start:05d}.safetensors"
        if not known or path.exists():
            continue
        t1 = time.perf_counter()
        targets = neutral_targets(model, tok, [cases[i].request for i in known], hp)
        write_bytes_atomic(path, st_save({"z": targets.z.contiguous(), "h0": targets.h0.contiguous(),
                                          "nll": targets.nll.contiguous(),
                                          "steps": torch.tensor(targets.steps_run)}))
        LOG.info("targets %d-%d: %.0f s", start, start + len(known), time.perf_counter() - t1)


def _load_targets(tdir: Path, n: int, first: int = 0) -> NeutralTargets:
    """Targets of prepared facts ``first .. first + n - 1`` (``first`` a multiple of :data:`CHUNK`)."""
    from safetensors.torch import load as st_load

    if first % CHUNK:
        raise SystemExit(f"--start must be a multiple of {CHUNK}, got {first}")
    parts = []
    for start in range(first, first + n, CHUNK):
        path = tdir / f"chunk_{start:05d}.safetensors"
        if not path.exists():
            raise SystemExit(f"{path}: targets for facts {start}-{start + CHUNK} not prepared yet")
        parts.append(st_load(path.read_bytes()))
    cat = {key: torch.cat([p[key] for p in parts])[:n] for key in parts[0]}
    return NeutralTargets(z=cat["z"], h0=cat["h0"], nll=cat["nll"], steps_run=cat["steps"].tolist())


def scores(model, tok, cases, ppl_tokens: int) -> Dict[str, float]:
    """Eff, first-token Eff, Gen, Spe (token accuracy x100, mean over probes) and PPL."""
    forget = evaluate_probes(model, tok, [p for c in cases for p in c.forget])
    para = evaluate_probes(model, tok, [p for c in cases for p in c.paraphrase])
    neigh = evaluate_probes(model, tok, [p for c in cases for p in c.neighbour])
    return {
        "eff": 100 * fmean(forget["acc"]),
        "eff_first": 100 * fmean(forget["first_acc"]),
        "gen": 100 * fmean(para["acc"]) if para["acc"] else float("nan"),
        "spe": 100 * fmean(neigh["acc"]),
        "ppl": perplexity(model, tok, default_ppl_text(), max_tokens=ppl_tokens),
    }


def utility_weighted_basis(C: torch.Tensor, threshold: float) -> torch.Tensor:
    """``U0 diag(sqrt(threshold / lambda))`` ``[d_in, r]``: the null-space basis of ``C`` ``[d_in, d_in]`` scaled so
    that the solve's ``c ||F'||^2`` becomes ``c sum_j (lambda_j / threshold) ||D u_j||^2``: an update along a
    direction with eigenvalue ``lambda_j`` costs in proportion to the utility energy it moves (the threshold's own
    directions as before, emptier ones cheaper). ``solve_exact`` uses ``U0`` only via ``U0^T K_f`` and ``F U0^T``."""
    evals, evecs = torch.linalg.eigh(0.5 * (C + C.T).double())
    below = evals < threshold
    scale = (threshold / evals[below].clamp_min(1e-12)).sqrt()
    return evecs[:, below] * scale[None, :]


def diagnostic_solver(hp: ZeroUnlearnGDHyperParams, log: List[Dict[str, Any]], c0_norm: bool = False):
    """The method's solver (or, ``c0_norm``, its utility-weighted variant), recording per layer what the solve
    faced and did (pure reads)."""
    from zerounlearn_editor.methods.zerounlearn_gd.solve import solve_exact

    solve = zerounlearn_gd_solver(hp)

    def run(problem: LayerProblem) -> torch.Tensor:
        protected = protected_covariance(problem.C0, problem.K_r, hp.retain_nullspace_weight)
        U0, _ = nullspace_basis(protected, hp.nullspace_threshold)
        K = problem.K_f
        Kt = U0.T @ K                                  # [r, n]
        s = torch.linalg.svdvals(Kt) if Kt.numel() else torch.zeros(1, dtype=K.dtype)
        rank = int((s > s.max() * 1e-6).sum()) if s.numel() else 0
        need = problem.M_n - problem.M_f               # [d_out, n] value change the layer must carry
        if c0_norm:
            U = utility_weighted_basis(protected, hp.nullspace_threshold)
            D = solve_exact(problem.W, K, problem.M_f, problem.M_n, U, a=hp.orthogonality_weight,
                            b=hp.target_weight, c=hp.norm_weight)
            new_W = problem.W + D
        else:
            new_W = solve(problem)
        D = new_W - problem.W
        left = problem.M_n - new_W @ K
        c, b = hp.norm_weight, hp.target_weight
        g = s.square()
        C0 = problem.C0
        log.append({
            "layer": problem.layer,
            "null_rank_r": U0.shape[1],
            "d_in": K.shape[0],
            "c0_energy_in_null": float((U0 * (C0 @ U0)).sum() / C0.trace()),
            "keys_energy_in_null": float(Kt.square().sum() / K.square().sum()),
            "keys_rank_in_null": rank,
            "sv_max": float(s.max()),
            "sv_min": float(s.min()),
            "cond_Kt": float(s.max() / s.min().clamp_min(1e-300)),
            "frac_dirs_b_g_over_c": float((b * g > c).float().mean()),
            "need_rel": float(need.norm() / problem.M_f.norm()),
            "carried": float(1 - left.norm() / need.norm()),
            "rel_change": float(D.norm() / problem.W.norm()),
            # relative change of the layer's output energy on the statistics corpus: tr(D C0 D^T) / tr(W C0 W^T)
            "utility_change": float((D * (D @ C0)).sum() / (problem.W * (problem.W @ C0)).sum()),
        })
        return new_W

    return run


def _hp_for(base: ZeroUnlearnGDHyperParams, lever: Dict[str, Any]) -> ZeroUnlearnGDHyperParams:
    keys = {k: v for k, v in lever.items() if k not in ("name", "passes", "chunks", "protect_chunks", "c0_norm")}
    return base.replace(**keys)


def run(args) -> None:
    out = Path(args.dir)
    base_hp = _load_hp(args.yaml)
    model, tok = load_model_and_tokenizer(base_hp.model_name)
    state = read_json(out / "cases.json")
    all_cases = load_cases(state["data"])
    cases = [all_cases[i] for i in state["known"][args.start: args.start + args.n]]
    if len(cases) < args.n:
        raise SystemExit(f"only {len(cases)} known cases prepared, {args.n} asked")
    requests = [c.request for c in cases]
    targets = _load_targets(out / f"targets_{_settings_key(model, base_hp)}", args.n, args.start)
    tag = f"n{args.n}" + (f"_from{args.start}" if args.start else "")
    base_path = out / f"base_{tag}.json"
    if not base_path.exists():
        write_json_atomic(base_path, scores(model, tok, cases, args.ppl_tokens))
    base = read_json(base_path)
    levers = json.loads(Path(args.grid).read_text()) if args.grid else [json.loads(args.lever)]
    for lever in levers:
        path = out / "runs" / f"{lever['name']}_{tag}.json"
        if path.exists():
            continue
        hp = _hp_for(base_hp, lever)
        if target_settings(model, hp) != target_settings(model, base_hp):
            raise SystemExit(f"lever {lever['name']}: its target settings differ from the prepared targets'")
        LOG.info("lever %s at n = %d: %s", lever["name"], args.n, lever)
        t0 = time.perf_counter()
        stats = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
        stats_s = time.perf_counter() - t0
        diag: List[Dict[str, Any]] = []
        originals: Dict[str, torch.Tensor] = {}
        reports = []
        t0 = time.perf_counter()
        chunks = int(lever.get("chunks", 1))
        bounds = [(i * args.n // chunks, (i + 1) * args.n // chunks) for i in range(chunks)]
        for _pass in range(int(lever.get("passes", 1))):
            for lo, hi in bounds:
                sub = NeutralTargets(targets.z[lo:hi], targets.h0[lo:hi], targets.nll[lo:hi], targets.steps_run[lo:hi])
                retain = requests[:lo] if lever.get("protect_chunks") and lo else None
                weights, report = run_layerwise_edit(
                    model,
                    tok,
                    requests[lo:hi],
                    hp,
                    diagnostic_solver(hp, diag, bool(lever.get("c0_norm"))),
                    second_moments=stats,
                    targets=sub,
                    progress=False,
                    fluency_guard="warn",
                    retain=retain,
                )
                for k, v in weights.items():
                    originals.setdefault(k, v)
                reports.append(report)
        edit_s = time.perf_counter() - t0
        total_change = {}
        params = dict(model.named_parameters())
        for k, v in originals.items():
            total_change[k] = float((params[k].detach().double() - v.double()).norm() / v.double().norm())
        post = scores(model, tok, cases, args.ppl_tokens)
        restore_weights(model, originals)
        row = {"lever": lever, "n": args.n, "first_fact": args.start, "base": base, "post": post,
               "rel": {"eff": post["eff"] / base["eff"], "eff_first": post["eff_first"] / max(base["eff_first"], 1e-9),
                       "spe": post["spe"] / base["spe"], "ppl": post["ppl"] / base["ppl"] - 1},
               "guard": [r.fluency for r in reports], "layers": diag, "total_rel_change": total_change,
               "seconds": {"statistics": stats_s, "edit": edit_s,
                           "stages": [r.timings for r in reports]},
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        write_json_atomic(path, row)
        LOG.info("%s n=%d: Eff %.1f (%.0f%% of base) first %.1f Spe %.1f (%.0f%%) PPL %+.1f%% guard %s", lever["name"],
                 args.n, post["eff"], 100 * row["rel"]["eff"], post["eff_first"], post["spe"], 100 * row["rel"]["spe"],
                 100 * row["rel"]["ppl"], [round(100 * g.get("increase", 0), 1) for g in row["guard"]])


def spectrum(args) -> None:
    """Per layer: the null-space dimension ``r`` of the cached ``C0`` at each threshold and the share of the
    statistics corpus' key energy ``tr(P_m C0) / tr(C0)`` inside it (no model needed)."""
    import numpy as np

    rows = {}
    for layer in args.layers:
        path = Path(args.stats) / f"model.layers.{layer}.mlp.down_proj_float32_mom2_{args.samples}.npz"
        with np.load(path) as data:
            C = data["mom2.mom2"].astype(np.float64) / float(data["mom2.count"])
        evals = np.linalg.eigvalsh(0.5 * (C + C.T))
        rows[layer] = {"eig_min": float(evals[0]), "eig_median": float(np.median(evals)), "eig_max": float(evals[-1]),
                       "thresholds": {str(t): {"r": int((evals < t).sum()),
                                               "c0_energy_in_null": float(evals[evals < t].sum() / evals.sum())}
                                      for t in args.thresholds}}
        LOG.info("layer %d: eigenvalues %.2g .. %.2g (median %.2g); %s", layer, evals[0], evals[-1], np.median(evals),
                 ", ".join(f"t={t:g}: r={v['r']} energy {v['c0_energy_in_null']:.3f}"
                           for t, v in zip(args.thresholds, rows[layer]["thresholds"].values())))
    write_json_atomic(Path(args.out), {"samples": args.samples, "layers": rows})


def table(args) -> None:
    rows = []
    for path in sorted(Path(args.dir).glob("runs/*.json")):
        r = read_json(path)
        p = r["post"]
        layers = r["layers"][-len(r["lever"].get("layers", [16, 17, 18])):]
        rows.append(
            f"| {r['lever']['name']} | {r['n']}{'' if not r.get('first_fact') else ' from ' + str(r['first_fact'])} | "
            f"{p['eff']:.1f} ({100 * r['rel']['eff']:.0f}%) | {p['eff_first']:.1f} | "
            f"{p['spe']:.1f} ({100 * r['rel']['spe']:.0f}%) | {p['ppl']:.2f} ({100 * r['rel']['ppl']:+.1f}%) | "
            f"{max(100 * g.get('increase', 0) for g in r['guard']):+.1f}% | "
            + " ".join(
                f"{d['layer']}:r{d['null_rank_r']}/e{d['keys_energy_in_null']:.3f}/c{d['carried']:.2f}/"
                f"w{d['rel_change']:.2f}/u{d['utility_change']:.1e}"
                for d in layers
            )
            + " |"
        )
    print(
        "| lever | n | Eff | Eff 1st | Spe | PPL | guard | per layer (r / K_f energy in null / carried / rel dW / "
        "utility change) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--min-accuracy", type=float, default=0.5)
    p.add_argument("--dir", required=True)
    p.add_argument("--yaml", default=None)
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--n", type=int, required=True)
    r.add_argument("--start", type=int, default=0, help="first prepared fact (held-out facts: past the tuned ones)")
    r.add_argument("--grid", default=None, help="JSON list of levers: {name, <hparams key>: value, passes, chunks}")
    r.add_argument("--lever", default='{"name": "paper"}')
    r.add_argument("--ppl-tokens", type=int, default=3000)
    r.add_argument("--yaml", default=None)
    sp = sub.add_parser("spectrum")
    sp.add_argument("--stats", default="data/stats/SmolLM2-135M-Instruct/wiki_passages_3643_stats")
    sp.add_argument("--samples", type=int, default=400)
    sp.add_argument("--layers", type=int, nargs="+", default=list(range(12, 19)))
    sp.add_argument("--thresholds", type=float, nargs="+", default=[3e-3, 5e-3, 1e-2, 3e-2, 1e-1, 3e-1])
    sp.add_argument("--out", default="benchmarks/results/scale/capacity/c0_spectrum.json")
    t = sub.add_parser("table")
    t.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    {"prepare": prepare, "run": run, "spectrum": spectrum, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
