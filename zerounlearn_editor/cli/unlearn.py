"""``zerounlearn unlearn``: forget the facts of a file, print a before/after table, save the model or an adapter."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.audit import add_probe_options, refuse_unused_probe_options, settings_from_args


def _cmd_unlearn(args: argparse.Namespace) -> int:
    from zerounlearn_editor.applications.unlearn import UnlearnSettings, format_unlearn, run_unlearn
    from zerounlearn_editor.engine.fluency_guard import FluencyError

    if not args.audit:
        refuse_unused_probe_options(args, "audit-", "--audit")
    try:
        settings = UnlearnSettings(
            save=args.save, device=args.device, dtype=args.dtype, corpus=args.corpus, ppl_tokens=args.ppl_tokens,
            ppl_text=args.ppl_text, progress=not args.no_progress,
            audit=settings_from_args(args, prefix="audit_") if args.audit else None,
            fluency_guard="warn" if args.allow_fluency_loss else None,
        )
        result = run_unlearn(args.hparams, args.facts, args.out, retain_file=args.retain, model_name=args.model,
                             settings=settings, replace_ledger=args.replace_ledger,
                             allow_came_back=args.allow_came_back)
    except FluencyError as exc:  # name this command's option, not the API argument
        raise exc.with_override("--allow-fluency-loss") from None
    print(format_unlearn(result))
    if result.fluency:
        f = result.fluency
        print(f"fluency guard ({f['tokens']} tokens of the built-in text): perplexity {f['ppl_before']:.3f} -> "
              f"{f['ppl_after']:.3f} ({100 * f['increase']:+.1f}%, allowed {100 * f['max_increase']:+.0f}%)")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``unlearn`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "unlearn",
        help="forget the facts of a file; print a before/after table; save the model or a PEFT LoRA adapter",
        description="FILE: JSON, JSONL or YAML list of {prompt, subject, answer} (answer optional, only scored). "
        "The method is the hparams file's alg_name. --save adapter writes a PEFT LoRA adapter of the edit "
        "(PeftModel.from_pretrained(base, OUT)); --save model the edited model (safetensors) and tokenizer.",
        parents=[parents.hparams(f"YAML of an editing method ({parents.editing_methods_text()}; a baseline's "
                                 "YAML is refused: the bench runs those)", required=True),
                 parents.out("output folder (model / adapter and unlearn_report.json)", metavar="DIR"),
                 parents.model(),
                 # no choices here (unlearn never checked them): a wrong name fails when the model loads
                 parents.dtype("torch dtype to load the model in (default: the checkpoint's)", choices=None),
                 parents.corpus(), parents.ppl(2000, "perplexity tokens (default 2000; 0 = off)"),
                 parents.device(), parents.progress()],
    )
    p.add_argument("--facts", required=True, metavar="FILE", help="facts to forget (.json, .jsonl, .yaml)")
    # a file of facts, not bench's POLICY:K draw: not the shared --retain
    p.add_argument("--retain", default=None, metavar="FILE", help="facts to keep (needs a retain-aware YAML)")
    p.add_argument("--save", choices=["model", "adapter", "none"], default="adapter")
    p.add_argument("--audit", action="store_true", help="also the robustness audit of the facts (zerounlearn audit's "
                   "probes) before and after, in the table and unlearn_report.json")
    add_probe_options(p, prefix="audit-")
    p.add_argument("--allow-fluency-loss", action="store_true",
                   help="keep an edit beyond the YAML's fluency_max_increase (with a warning) instead of refusing it")
    p.add_argument("--replace-ledger", action="store_true",
                   help="--out may hold a ledger this run does not continue (--model is not that folder): replace it "
                   "(refused without this option)")
    p.add_argument("--allow-came-back", action="store_true",
                   help="keep an edit that makes the model give again a fact the continued ledger lists as not "
                   "answered (refused without this option, nothing written); the ledger marks it \"came back\"")
    p.set_defaults(func=_cmd_unlearn)
