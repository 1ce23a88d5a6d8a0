"""Issue 48 item 2: why the init-hparams targets do not converge on Gemma-3-270m, measured in model quantities.

Per run, on the first ``--limit`` facts of ``--facts`` the model answers (greedy first token):

* scales at each edited layer (bare prompt, subject's last token): the residual ``h0`` after the layer (RMS per
  coordinate and norm), the edited module's output ``v`` and what reaches the residual from it (``f(v)``, through
  the post-feedforward norm on Gemma), the keys' mean square, and ``C0``'s eigenvalues (mean = trace / d_in,
  median, share below the YAML's nullspace_threshold) from a statistic of ``--n-samples`` passages;
* for each ``--grid`` setting (``key=value,key=value;...`` over the YAML): the neutral targets' final loss per
  fact, steps run, |delta| / |h0|, and whether one third of delta passes each edited layer's post-MLP map
  (relative error of ``f(v + dv) - f(v)`` against the wanted change).

    python benchmarks/gemma_rules/diagnose.py --model ~/.cache/zerounlearn_editor/models/gemma-3-270m \\
        --hparams gemma.yaml --facts benchmarks/results/gemma/facts20.json --limit 10 \\
        --grid "v_lr=0.1;v_lr=1" --out diag.json
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from zerounlearn_editor.applications.unlearn import load_facts
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.engine.post_mlp import apply_post_mlp, detect_post_mlp_maps, value_change
from zerounlearn_editor.harness.causal_trace import TraceFact, answered_facts
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.support.model_access import capture_inputs, capture_outputs, hidden_of

LOG = logging.getLogger("diagnose")


def subject_last(tok, prompt: str, subject: str) -> int:
    """Token index of the subject's last token in ``prompt`` (with the tokenizer's BOS)."""
    end = prompt.index(subject) + len(subject)
    return len(tok(prompt[:end])["input_ids"]) - 1


def layer_scales(model, tok, facts, hp, maps):
    """Per edited layer: residual, value and post-MLP output sizes at the subject's last token (means over facts)."""
    out = {}
    rows = {l: [] for l in hp.layers}
    for fact in facts:
        ids = tok(fact["prompt"], return_tensors="pt")
        pos = subject_last(tok, fact["prompt"], fact["subject"])
        names = [hp.layer_module_tmp.format(l) for l in hp.layers]
        rewrites = [hp.rewrite_module_tmp.format(l) for l in hp.layers]
        with torch.no_grad(), capture_outputs(model, names + rewrites) as outs, capture_inputs(model, rewrites) as ins:
            model(**ids)
        for l, name, rw in zip(hp.layers, names, rewrites):
            h = hidden_of(outs[name])[0, pos].double()
            v = hidden_of(outs[rw])[0, pos].double()
            k = ins[rw][0, pos].double()
            fv = apply_post_mlp(maps[l], v[:, None])[:, 0]
            rows[l].append(dict(h_norm=float(h.norm()), h_rms=float(h.pow(2).mean().sqrt()), v_norm=float(v.norm()),
                                fv_norm=float(fv.norm()), key_ms=float(k.pow(2).mean())))
    for l, rs in rows.items():
        out[l] = {key: sum(r[key] for r in rs) / len(rs) for key in rs[0]}
        out[l]["map"] = maps[l].describe()
        if maps[l].gain is not None:
            out[l]["gain_norm"] = float(maps[l].gain.norm())
    return out


def c0_spectrum(model, tok, hp, thresholds):
    """``C0``'s eigenvalue summary per edited layer."""
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    out = {}
    for l, m in moments.items():
        c0 = m.moment().double()
        ev = torch.linalg.eigvalsh(c0)
        out[l] = dict(d_in=int(c0.shape[0]), mean=float(ev.mean()), median=float(ev.median()), max=float(ev.max()),
                      below={str(t): int((ev < t).sum()) for t in thresholds})
    return out


def closest_rms_change(spec, v, want, iters: int = 200):
    """Experimental: the value change whose post-norm output is the point of the norm's image closest to
    ``f(v) + want`` (``min |g u - t|`` over ``|u|^2 = d``: ``u = g t / (g^2 + lam)``, ``lam`` by bisection)."""
    g = spec.gain.to(v)[:, None] * spec.scale
    t = apply_post_mlp(spec, v) + want
    d = v.shape[0]
    g2 = g.pow(2)
    lo = torch.full((1, v.shape[1]), float(-g2.min()) + 1e-12, dtype=v.dtype)
    hi = (g * t).norm(dim=0, keepdim=True) / d ** 0.5 + 1.0
    for _ in range(iters):
        mid = (lo + hi) / 2
        too_long = ((g * t / (g2 + mid)).pow(2).sum(0, keepdim=True) > d)
        lo, hi = torch.where(too_long, mid, lo), torch.where(too_long, hi, mid)
    u = g * t / (g2 + (lo + hi) / 2)
    return u * (v.norm(dim=0, keepdim=True) / u.norm(dim=0, keepdim=True)) - v


def norm_survival(model, tok, facts, hp, maps, delta):
    """Relative error of the residual change each edited layer's value change gives for delta / len(layers)."""
    out = {}
    for l in hp.layers:
        errs, closest = [], []
        rw = hp.rewrite_module_tmp.format(l)
        for i, fact in enumerate(facts):
            ids = tok(fact["prompt"], return_tensors="pt")
            pos = subject_last(tok, fact["prompt"], fact["subject"])
            with torch.no_grad(), capture_outputs(model, [rw]) as outs:
                model(**ids)
            v = hidden_of(outs[rw])[0, pos].double()[:, None]
            want = delta[i].double()[:, None] / len(hp.layers)
            dv = value_change(maps[l], v, want)
            got = apply_post_mlp(maps[l], v + dv) - apply_post_mlp(maps[l], v)
            errs.append(float((got - want).norm() / want.norm().clamp_min(1e-30)))
            if maps[l].kind == "rms":
                dv2 = closest_rms_change(maps[l], v, want)
                got2 = apply_post_mlp(maps[l], v + dv2) - apply_post_mlp(maps[l], v)
                closest.append(float((got2 - want).norm() / want.norm().clamp_min(1e-30)))
        out[l] = dict(mean_rel_err=sum(errs) / len(errs), max_rel_err=max(errs))
        if closest:
            out[l].update(closest_mean_rel_err=sum(closest) / len(closest), closest_max_rel_err=max(closest))
    return out


def parse_grid(spec: str):
    runs = []
    for part in spec.split(";"):
        part = part.strip()
        runs.append({} if not part else {k: yaml.safe_load(v) for k, v in (kv.split("=") for kv in part.split(","))})
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--hparams", required=True)
    p.add_argument("--facts", required=True)
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--n-samples", type=int, default=100)
    p.add_argument("--stats-dir", default="data/stats")
    p.add_argument("--grid", default="")
    p.add_argument("--no-targets", action="store_true")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    model_dir = os.path.expanduser(args.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hp = ZeroUnlearnGDHyperParams.from_hparams(args.hparams).replace(
        mom2_n_samples=args.n_samples, mom2_max_length=128, stats_dir=args.stats_dir, model_name=model_dir)
    all_facts = load_facts(args.facts)
    known = answered_facts(model, tok, [TraceFact(f["prompt"], f["subject"], f["ground_truth"]) for f in all_facts])
    keep = {(f.prompt, f.subject) for f in known}
    facts = [f for f in all_facts if (f["prompt"], f["subject"]) in keep][: args.limit]
    maps = detect_post_mlp_maps(model, hp.layer_module_tmp, hp.rewrite_module_tmp, hp.layers)
    row = dict(model=args.model, hparams=args.hparams, layers=list(hp.layers), n_known=len(known),
               n_facts=len(facts), facts=[f["prompt"] for f in facts])
    row["scales"] = layer_scales(model, tok, facts, hp, maps)
    row["c0"] = c0_spectrum(model, tok, hp, [hp.nullspace_threshold, 2e-2, 3e-2])
    Path(args.out).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    row["runs"] = []
    for change in ([] if args.no_targets else parse_grid(args.grid)):
        run_hp = hp.replace(**change)
        start = time.perf_counter()
        targets = neutral_targets(model, tok, facts, run_hp)
        delta = targets.z - targets.h0
        run = dict(change=change, seconds=time.perf_counter() - start, nll=[round(float(x), 3) for x in targets.nll],
                   nll_mean=float(targets.nll.mean()), steps=list(targets.steps_run),
                   delta_over_h0=[round(float(x), 3) for x in delta.norm(dim=1) / targets.h0.norm(dim=1)],
                   survival=norm_survival(model, tok, facts, run_hp, maps, delta))
        torch.save(delta, Path(args.out).with_suffix(f".delta{len(row['runs'])}.pt"))
        LOG.info("run %s: nll mean %.3f %s", change, run["nll_mean"], run["nll"])
        row["runs"].append(run)
        Path(args.out).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
