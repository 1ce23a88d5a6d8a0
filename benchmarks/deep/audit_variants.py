"""``zerounlearn audit`` with extra rows: ZeroUnlearn(-GD) YAMLs under names of their own.

The audit's registry has one row per method name (``ZeroUnlearn-GD`` reads one YAML); the
deep-forgetting study compares several YAMLs of one method on the same cases and plan, so this
script adds ``--variant NAME=YAML`` rows (each the bench's ZeroUnlearn(-GD) method reading that
YAML) and runs :func:`zerounlearn_editor.harness.audit.run_audit` with them. The known-case
selection (a pass over the whole dataset) is cached in ``--known-cache`` as case ids.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/deep/audit_variants.py --out OUT --seeds 11 --n 10 \\
        --methods base,ZeroUnlearn-GD,deep --variant deep=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-deep.yaml \\
        --probes formats,in_context,lens --shots 3

``--retain-variant NAME=YAML`` adds a retain-aware row (``ZeroUnlearn-GD+R`` reading YAML, fed the seed's retain
set drawn by ``--retain POLICY:K``, the same draw for every retain-aware row).

``--scaled-variant NAME=YAML@S`` adds a retain-aware row like ``--retain-variant`` whose edit is then scaled, every
edited weight ``W + S (W' - W)`` (a diagnostic: what a smaller change along the same direction keeps).

``--half tune`` / ``--half report`` keep one half of the 80 cached known CounterFact cases (40 each, disjoint), so
tuning and reporting use different facts (``--n 40`` then edits the whole half in one batch).

``--cases FILE`` audits the case ids of FILE (``{"case_ids": [...]}``, in its order; e.g. the never-known facts
``benchmarks/deep/never_known.py`` draws) in place of the known cases; everything else (the pool of borrowed
facts, the probes, "recovered") is the audit's as for forgotten facts.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Callable, List, Optional

from zerounlearn_editor.evaluation import selection
from zerounlearn_editor.evaluation.audit.plan import AuditSettings, parse_families
from zerounlearn_editor.harness import runner as bench_runner
from zerounlearn_editor.harness.audit import AuditConfig, run_audit
from zerounlearn_editor.harness.bench_config import BenchConfig, parse_seeds
from zerounlearn_editor.harness.method_rows import default_registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from known_cases import add_variants, cached_known_selection, scaled_variant_spec  # noqa: E402  (shared with audit/all_methods.py)

DEFAULT_HPARAMS = "hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml"


def half_of(select: Callable[..., List], half: Optional[str]) -> Callable[..., List]:
    """``select`` keeping only the ``half`` ("tune": even positions, "report": odd positions of the known cases
    sorted by integer case id); ``None`` keeps all."""
    if half is None:
        return select
    parity = 0 if half == "tune" else 1

    def pick(*args, **kwargs):
        known = sorted(select(*args, **kwargs), key=lambda c: int(c.case_id))
        return [c for i, c in enumerate(known) if i % 2 == parity]

    return pick


def listed_cases(path: Path) -> Callable[..., List]:
    """A known-case selection that returns the cases whose ids FILE ``path`` lists (``{"case_ids": [...]}``), in
    that order; ``ValueError`` naming the file and the first id the data does not hold."""
    ids = [str(i) for i in json.loads(path.read_text(encoding="utf-8"))["case_ids"]]

    def pick(model, tok, cases, *args, **kwargs):
        by_id = {c.case_id: c for c in cases}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"{path}: case id {missing[0]!r} is not in the data ({len(missing)} missing)")
        return [by_id[i] for i in ids]

    return pick


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hparams", default=DEFAULT_HPARAMS)
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="11")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--methods", default="base,ZeroUnlearn-GD")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=YAML")
    ap.add_argument("--retain-variant", action="append", default=[], metavar="NAME=YAML",
                    help="a retain-aware row: the bench's ZeroUnlearn-GD+R reading YAML, fed the seed's retain set "
                         "(needs --retain)")
    ap.add_argument("--scaled-variant", action="append", default=[], metavar="NAME=YAML@S",
                    help="a retain-aware row whose edit is scaled afterwards: W + S (W' - W) at every edited weight "
                         "(a diagnostic; needs --retain)")
    ap.add_argument("--probes", default="formats,in_context,lens")
    ap.add_argument("--shots", default="3")
    ap.add_argument("--relearn-scopes", default="mlp,full", help="relearning probe: fine-tuned weights (mlp, full)")
    ap.add_argument("--known-cache", default="benchmarks/results/deep/known_counterfact_easyedit.json")
    ap.add_argument("--half", choices=("tune", "report"), default=None,
                    help="keep one half of the cached known cases: sorted by integer case id, even positions = tune, "
                         "odd = report (disjoint tuning and report facts)")
    ap.add_argument("--cases", default=None, metavar="FILE",
                    help='audit the case ids of FILE ({"case_ids": [...]}) in place of the known cases')
    ap.add_argument("--retain", default=None)
    ap.add_argument("--bench", action="store_true", help="run the bench (Eff/Gen/Spe/PPL) instead of the audit")
    ap.add_argument("--ppl-tokens", type=int, default=None, help="bench: perplexity tokens (default the bench's)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry = default_registry()
    add_variants(registry, args.variant)
    add_variants(registry, args.retain_variant, "ZeroUnlearn-GD+R")
    for item in args.scaled_variant:
        name, rest = item.split("=", 1)
        path, scale = rest.rsplit("@", 1)
        registry[name] = scaled_variant_spec(name, path, float(scale), "ZeroUnlearn-GD+R")
    if args.cases is not None and args.half is not None:
        ap.error("--cases and --half: give one")
    known = cached_known_selection(Path(args.known_cache)) if args.cases is None else listed_cases(Path(args.cases))
    selection.select_known_cases = half_of(known, args.half)
    bench_runner.select_known_cases = selection.select_known_cases
    seeds = parse_seeds(args.seeds)
    methods = [m for m in args.methods.split(",") if m]
    if args.bench:
        extra = {} if args.ppl_tokens is None else {"ppl_tokens": args.ppl_tokens}
        summary = bench_runner.run_bench(BenchConfig(hparams=args.hparams, data=args.data, seeds=seeds, methods=methods,
                                                     out=args.out, n=args.n, known_only=True, retain=args.retain,
                                                     progress=False, **extra), registry=registry)
        print(summary.get("table_markdown", ""))
        return
    settings = AuditSettings(families=parse_families(args.probes), shots=tuple(int(s) for s in args.shots.split(",")),
                             relearn_scopes=tuple(args.relearn_scopes.split(",")))
    config = AuditConfig(hparams=args.hparams, data=args.data, out=args.out, seeds=seeds, n=args.n,
                         methods=methods, settings=settings, known_only=True,
                         retain=args.retain, progress=False)
    summary = run_audit(config, registry=registry)
    print(summary["table_markdown"])


if __name__ == "__main__":
    main()
