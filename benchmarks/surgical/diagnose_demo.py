"""Where the sibling loss comes from, on the demo's facts (SmolLM2, 5 capitals to forget).

For each variant: forget accuracy of the 5 capitals, accuracy on the 5 sibling capitals the demo
never edits (``OTHER_CAPITALS``), on unrelated facts, and per edited layer the value change a
sibling key sees relative to a forget key, ``mean_s ||dW k_s|| / mean_f ||dW k_f||`` (keys read on
the unedited model; 1.0 = a sibling is moved as much as a forgotten fact). Variants: the paper's
ZeroUnlearn and its projector alone (``forget_weight 0``), the paper's edit on one layer at a time,
ZeroUnlearn-GD at three null-space thresholds, and the retain-aware rows (retain set: the demo's
``RETAIN_FACTS``, disjoint from every scored fact). The rows of knobs retired in issue 27
(``D0`` only via ``projection_utility_weight``, ZeroUnlearn+R) are in the JSON of commit fb1a558
and in benchmarks/notebook/2026-11-23-surgical-diagnosis-ablation.md::

    OMP_NUM_THREADS=1 python benchmarks/surgical/diagnose_demo.py --out benchmarks/results/surgical/diagnose_demo

Writes ``OUT/diagnose.json`` and ``OUT/diagnose.md``.
"""
from __future__ import annotations

import argparse
import logging
import statistics
from pathlib import Path
from typing import Dict, List

import torch

from zerounlearn_editor import apply_zerounlearn_gd_to_model, apply_zerounlearn_to_model, restore_weights
from zerounlearn_editor.cli.demo import FORGET_FACTS, RETAIN_FACTS
from zerounlearn_editor.data.facts import OTHER_CAPITALS, UNRELATED_FACTS, fact_requests
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.contexts import CONTEXT_SEED, context_prefixes
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.evaluation import evaluate_probes
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
from zerounlearn_editor.support.resources import hparams_path

LOG = logging.getLogger("diagnose_demo")
SIBLINGS = OTHER_CAPITALS
UNRELATED = UNRELATED_FACTS[:5]


def _acc(model, tok, facts) -> float:
    return statistics.fmean(evaluate_probes(model, tok, [Probe(p, a) for p, _, a in facts])["acc"])


def _keys(model, tok, hp, facts, layer: int) -> torch.Tensor:
    """Keys ``[d_in, n]`` of ``facts`` at ``layer``'s down_proj (unedited model, the edit's contexts)."""
    prefixes = context_prefixes(model, tok, hp.context_template_count, hp.context_template_length, CONTEXT_SEED)
    module = hp.rewrite_module_tmp.format(layer)
    readout = read_keys_and_hidden(model, tok, normalize_requests(fact_requests(facts)), prefixes, module,
                                   hp.layer_module_tmp.format(layer), hp.fact_token, 16)
    return readout.keys.double()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    zu = ZeroUnlearnHyperParams.from_hparams(hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct"))
    gd = ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct"))
    model, tok = load_model_and_tokenizer(str(zu.model_name))
    moments = batched_statistics(model, tok, zu, zu.mom2_dataset, progress=False)
    requests = fact_requests(FORGET_FACTS)
    retain = [{"prompt": p, "subject": s} for p, s, _ in RETAIN_FACTS]
    keys = {l: (_keys(model, tok, zu, FORGET_FACTS, l), _keys(model, tok, zu, SIBLINGS, l)) for l in zu.layers}
    cos = {}
    for l, (kf, ks) in keys.items():
        a, b = kf / kf.norm(dim=0), ks / ks.norm(dim=0)
        cos[l] = float((a.t() @ b).mean())
    targets = {tuple(zu.layers): neutral_targets(model, tok, requests, zu)}

    variants: List[Dict] = [
        dict(name="base"),
        dict(name="ZU (paper)", hp=zu),
        dict(name="ZU projector only (f=0)", hp=zu.replace(forget_weight=0.0)),
    ] + [dict(name=f"ZU (paper), layer {l} only", hp=zu.replace(layers=[l])) for l in zu.layers] + [
        dict(name=f"GD thr={t:g}", hp=gd.replace(nullspace_threshold=t)) for t in (1e-2, 3e-2, 1e-1)
    ] + [
        dict(name="GD+R (lam=0.1)", hp=gd.replace(retain_nullspace_weight=0.1), retain=True),
        dict(name="GD+R (lam=0.1, ctx=1)", hp=gd.replace(retain_nullspace_weight=0.1, context_nullspace_weight=1.0),
             retain=True),
    ]
    rows = []
    for v in variants:
        hp = v.get("hp")
        row = {"variant": v["name"]}
        if hp is None:
            row.update(forget=_acc(model, tok, FORGET_FACTS), siblings=_acc(model, tok, SIBLINGS),
                       unrelated=_acc(model, tok, UNRELATED))
            rows.append(row)
            continue
        layers = tuple(hp.layers)
        if layers not in targets:
            targets[layers] = neutral_targets(model, tok, requests, hp)
        apply = apply_zerounlearn_gd_to_model if hp.alg_name == "ZeroUnlearn-GD" else apply_zerounlearn_to_model
        before = {l: get_weight_matrix(get_module(model, hp.rewrite_module_tmp.format(l))).detach().double().clone()
                  for l in layers}
        extra = {"retain": retain} if v.get("retain") else {}
        model, orig = apply(model, tok, requests, hp, targets=targets[layers], second_moments=moments,
                            return_orig_weights=True, progress=False, **extra)
        try:
            row.update(forget=_acc(model, tok, FORGET_FACTS), siblings=_acc(model, tok, SIBLINGS),
                       unrelated=_acc(model, tok, UNRELATED))
            ratios = {}
            for l in layers:
                dW = get_weight_matrix(get_module(model, hp.rewrite_module_tmp.format(l))).detach().double() - before[l]
                kf, ks = keys[l]
                ratios[str(l)] = float((dW @ ks).norm(dim=0).mean() / (dW @ kf).norm(dim=0).mean())
            row["sibling_over_forget_change"] = ratios
        finally:
            restore_weights(model, orig)
        LOG.info("%s", row)
        rows.append(row)

    result = {"cosine_forget_sibling_keys": cos, "rows": rows,
              "facts": {"forget": FORGET_FACTS, "siblings": SIBLINGS, "retain": RETAIN_FACTS, "unrelated": UNRELATED}}
    write_json_atomic(out / "diagnose.json", result)
    lines = ["| variant | forget acc | sibling acc | unrelated acc | sibling/forget value change per layer |",
             "|---|---|---|---|---|"]
    for r in rows:
        ratio = ", ".join(f"L{l} {x:.2f}" for l, x in r.get("sibling_over_forget_change", {}).items()) or "-"
        lines.append(f"| {r['variant']} | {r['forget']:.2f} | {r['siblings']:.2f} | {r['unrelated']:.2f} | {ratio} |")
    lines.append("")
    lines.append("Mean cosine between forget and sibling keys: " +
                 ", ".join(f"layer {l} {c:.2f}" for l, c in cos.items()))
    (out / "diagnose.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
