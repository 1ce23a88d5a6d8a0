"""``zerounlearn plot``: Eff vs Spe and Eff vs PPL scatter (mean ± std over seeds) from bench summaries."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any


def _cmd_plot(args: argparse.Namespace) -> int:
    from zerounlearn_editor.harness.bench_config import parse_seeds
    from zerounlearn_editor.harness.summary_plot import collect_points, format_points, plot_summaries

    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    points = collect_points(args.summaries, methods, parse_seeds(args.seeds) if args.seeds else None)
    plot_summaries(points, args.out)
    print(format_points(points))
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``plot`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "plot", help="Eff vs Spe and Eff vs PPL scatter (mean ± std over seeds) from bench summary.json files",
        parents=[parents.methods("only these methods / variants (comma list; names with commas cannot be picked)"),
                 parents.seeds("surgical results.json only: average over these seeds (e.g. 1-3)"),
                 parents.out("PNG file", required=True)],
    )
    p.add_argument(
        "summaries",
        nargs="+",
        help="summary.json files of zerounlearn bench (one point per method and file), "
        "or results.json files of benchmarks/surgical/harness.py (one point per variant)",
    )
    p.set_defaults(func=_cmd_plot)
