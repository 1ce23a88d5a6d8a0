"""The ``zerounlearn audit`` subcommand (parser and command), and the shared ``--audit-*`` options."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.common import comma_list, comma_option, config_from_args
from zerounlearn_editor.harness.bench_config import default_audit_methods


def _int_list(text: str) -> tuple:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _names(text: str) -> tuple:
    return tuple(comma_list(comma_option(text)))


PROBE_DEFAULTS = {"probes": "all", "shots": (1, 3, 5), "quant": ("int8", "int4", "int4g16"), "relearn-steps": 10,
                  "relearn-lr": 1e-4, "relearn-scopes": ("mlp", "full"), "relearn-n": 32}
"""The defaults of :func:`add_probe_options` (also how :func:`refuse_unused_probe_options` tells a given option)."""


def add_probe_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The probe settings (``--probes``, ``--shots``, ...), optionally prefixed (``--audit-probes``)."""
    from zerounlearn_editor.evaluation.audit.plan import FAMILIES

    d = PROBE_DEFAULTS
    p.add_argument(
        f"--{prefix}probes",
        type=comma_option,
        default=d["probes"],
        help=f"probe families, comma list of {','.join(FAMILIES)} or all",
    )
    p.add_argument(
        f"--{prefix}shots", type=_int_list, default=d["shots"], help="in-context example counts (default 1,3,5)"
    )
    p.add_argument(f"--{prefix}quant", type=_names, default=d["quant"],
                   help="quantization schemes: int8, int4 (per channel), int4g16 (groups of 16)")
    p.add_argument(f"--{prefix}relearn-steps", type=int, default=d["relearn-steps"],
                   help="fine-tuning steps of the relearning probe (default 10)")
    p.add_argument(f"--{prefix}relearn-lr", type=float, default=d["relearn-lr"],
                   help="its Adam learning rate, finite, in (0, 1] (default 1e-4)")
    p.add_argument(f"--{prefix}relearn-scopes", type=_names, default=d["relearn-scopes"],
                   help="what the relearning and rtt probes fine-tune: mlp (MLP weights), full (every weight); "
                        "default both")
    p.add_argument(
        f"--{prefix}relearn-n", type=int, default=d["relearn-n"], help="related facts fine-tuned on (default 32)"
    )


def refuse_unused_probe_options(args: argparse.Namespace, prefix: str, switch: str) -> None:
    """``ValueError`` when a ``--<prefix>*`` option differs from its default but ``switch`` (``--audit``) is off:
    the option would be silently ignored."""
    given = [f"--{prefix}{name}" for name, default in PROBE_DEFAULTS.items()
             if getattr(args, (prefix + name).replace("-", "_")) != default]
    if given:
        raise ValueError(f"{', '.join(given)} given without {switch}: the audit does not run, so "
                         f"{'it' if len(given) == 1 else 'they'} would be ignored; add {switch} or drop "
                         f"{'it' if len(given) == 1 else 'them'}")


def settings_from_args(args: argparse.Namespace, prefix: str = "") -> Any:
    """:class:`~.plan.AuditSettings` from the options of :func:`add_probe_options` (validated; ``--batch-size``
    as given: 0 or a negative count is an error, not the default)."""
    from zerounlearn_editor.evaluation.audit.plan import AuditSettings, parse_families

    get = lambda name: getattr(args, (prefix + name).replace("-", "_"))  # noqa: E731
    batch_size = getattr(args, "batch_size", None)
    settings = AuditSettings(
        families=parse_families(get("probes")), shots=tuple(get("shots")), quant_schemes=tuple(get("quant")),
        relearn_steps=get("relearn-steps"), relearn_lr=get("relearn-lr"), relearn_scopes=tuple(get("relearn-scopes")),
        relearn_n=get("relearn-n"), batch_size=16 if batch_size is None else batch_size,
    )
    settings.validate()
    return settings


def _cmd_audit(args: argparse.Namespace) -> int:
    from zerounlearn_editor.harness.audit import AuditConfig, run_audit
    from zerounlearn_editor.harness.bench_config import parse_method_hparams, parse_seeds

    config = config_from_args(
        AuditConfig, args, seeds=parse_seeds(args.seeds), methods=comma_list(args.methods),
        settings=settings_from_args(args), method_hparams=parse_method_hparams(args.method_hparams),
        progress=not args.no_progress,
    )
    summary = run_audit(config)
    print(summary["table_markdown"])
    if summary.get("plot"):
        print(f"heatmap: {summary['plot']}")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``audit`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "audit",
        help="robustness audit: %% of forgotten facts recovered by paraphrases, questions, chat, in-context examples, "
             "multiple choice, logit lens, quantization, relearning (related facts, generic text) and rtt (RTT's "
             "split: fine-tune on half the forgotten facts, measure the other half), per method",
        description="For n cases per seed (edited as one batch by each method): the recovered % of every probe "
        "before (base) and after each edit. Writes OUT/audit_seed_K.json (resumable), audit.json, audit.md, audit.png.",
        parents=[parents.hparams("main ZeroUnlearn(-GD) YAML (model, statistics, first edited layer)", required=True),
                 parents.data("dataset name (counterfact, counterfact-easyedit, mquake, rwku, ...) or file",
                              required=True),
                 parents.out("output folder", required=True), parents.n("cases per seed (default 10)", default=10),
                 parents.seeds("e.g. 1 or 1-3 (default 1)", default="1"),
                 parents.methods(parents.bench_rows_help("bench methods") + " (EasyEdit's are skipped where it "
                                 "is not importable)", default=",".join(default_audit_methods())),
                 parents.method_hparams(), parents.known(), parents.retain_policy(),
                 parents.batch_size(default=16),
                 parents.device(), parents.dtype(), parents.progress(), parents.data_dir()],
    )
    add_probe_options(p)
    p.set_defaults(func=_cmd_audit)
