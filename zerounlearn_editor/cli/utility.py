"""``zerounlearn utility``: downstream few-shot accuracy of the unedited model and after each method."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.common import comma_list, comma_option, config_from_args


def _cmd_utility(args: argparse.Namespace) -> int:
    from zerounlearn_editor.evaluation.utility import parse_tasks
    from zerounlearn_editor.harness.bench_config import parse_method_hparams
    from zerounlearn_editor.harness.utility import UtilityConfig, format_utility_table, run_utility

    methods = comma_list(args.method)
    if methods and methods[0] != "base" and not args.no_base:
        methods = ["base", *methods]
    payload = run_utility(config_from_args(
        UtilityConfig, args, tasks=parse_tasks(args.tasks), methods=methods,
        method_hparams=parse_method_hparams(args.method_hparams),
        plot=args.plot if args.plot is not None else str(Path(args.out).with_suffix(".png")),
        progress=not args.no_progress,
    ))
    print(format_utility_table(payload))
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``utility`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "utility",
        help="downstream accuracy (sst2, mrpc, cola, rte, nli, mmlu) of the unedited model and after each method",
        description="Few-shot prompts; the answer is the label word (or choice letter) with the highest "
        "log-probability. Writes OUT (JSON) and a task x method bar chart beside it (needs matplotlib).",
        parents=[parents.hparams("main ZeroUnlearn(-GD) YAML: model, statistics (as for bench)", required=True),
                 parents.model(), parents.n("scored items per task (default 50)", default=50),
                 parents.seed("draw of the scored items and of the forget cases"),
                 parents.data("forget dataset name or file (needed by an editing method)"),
                 parents.retain_policy("retain set of ZeroUnlearn-GD+R, drawn as the bench draws it "
                                       "(siblings:K or same-answer:K)"),
                 parents.method_hparams(),
                 parents.data_dir("utility data folder (default ../shared/data/utility)", metavar=None),
                 parents.out("output JSON", required=True), parents.batch_size(None, default=8),
                 parents.device(),
                 parents.progress()],
    )
    p.add_argument("--tasks", type=comma_option, default="sst2,mrpc,cola,rte,nli,mmlu", help="comma list, or all")
    p.add_argument("--shots", type=int, default=3, help="solved examples before each query (default 3)")
    p.add_argument(
        "--method",
        type=comma_option,
        default="base",
        help="comma list of bench methods to edit with first (base = unedited; base is prepended unless --no-base)",
    )
    p.add_argument("--no-base", action="store_true", help="do not add the unedited model's row")
    p.add_argument("--n-forget", type=int, default=10, help="forget cases edited as one batch (default 10)")
    p.add_argument("--plot", default=None, help="chart PNG (default: OUT with .png)")
    p.set_defaults(func=_cmd_utility)
