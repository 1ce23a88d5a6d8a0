"""``zerounlearn audit`` for every method row, with the shipped retain-aware YAMLs as rows of their own.

The audit's registry has one retain-aware row (``ZeroUnlearn-GD+R``, ``...-retain.yaml``); this
script adds ``--retain-variant NAME=YAML`` rows (the bench's ``ZeroUnlearn-GD+R`` method reading
that YAML, fed the seed's retain set) and ``--variant NAME=YAML`` rows (the YAML's own method, e.g. a
``-deep.yaml``) and runs :func:`zerounlearn_editor.harness.audit.run_audit`
with the CLI's probe options. The known-case selection is read from (or written to)
``--known-cache`` (case ids; the cache of ``benchmarks/deep/``). MEMIT / AlphaEdit rows
need EasyEdit importable (run with EasyEdit's venv and ``EASYEDIT_PATH``); else they are skipped.

    OMP_NUM_THREADS=1 PYTHONPATH=. EASYEDIT_PATH=... $VENV_PY benchmarks/audit/all_methods.py \\
        --out benchmarks/results/audit/all_methods_n10 --seeds 1 --retain same-answer:10 \\
        --methods base,ZeroUnlearn,ZeroUnlearn-GD,ZeroUnlearn-GD+R,retain-many,GA,NPO,MEMIT,AlphaEdit \\
        --retain-variant retain-many=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain-many.yaml
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from zerounlearn_editor.cli.audit import add_probe_options, settings_from_args
from zerounlearn_editor.evaluation import selection
from zerounlearn_editor.harness.audit import AuditConfig, run_audit
from zerounlearn_editor.harness.bench_config import parse_seeds
from zerounlearn_editor.harness.method_rows import default_registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from known_cases import add_variants, cached_known_selection  # noqa: E402  (shared with deep/audit_variants.py)

_ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hparams", default="hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml")
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--methods", required=True)
    ap.add_argument("--retain", default=None, metavar="POLICY:K")
    ap.add_argument("--retain-variant", action="append", default=[], metavar="NAME=YAML")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=YAML",
                    help="a row of the YAML's own method reading that YAML (e.g. a -deep.yaml)")
    ap.add_argument("--known-cache", default=str(_ROOT / "results" / "deep" / "known_counterfact_easyedit.json"))
    add_probe_options(ap)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry = default_registry()
    add_variants(registry, args.variant)
    add_variants(registry, args.retain_variant, "ZeroUnlearn-GD+R")
    selection.select_known_cases = cached_known_selection(Path(args.known_cache))
    config = AuditConfig(hparams=args.hparams, data=args.data, out=args.out, seeds=parse_seeds(args.seeds), n=args.n,
                         methods=[m for m in args.methods.split(",") if m], settings=settings_from_args(args),
                         known_only=True, retain=args.retain, progress=False)
    summary = run_audit(config, registry=registry)
    print(summary["table_markdown"])


if __name__ == "__main__":
    main()
