"""``zerounlearn pca``: PCA of the forget samples' MLP outputs at an edited layer, before and after each method."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.common import comma_list, config_from_args
from zerounlearn_editor.harness.bench_config import default_pca_methods


def _cmd_pca(args: argparse.Namespace) -> int:
    from zerounlearn_editor.harness.bench_config import parse_method_hparams
    from zerounlearn_editor.harness.pca_shift import PcaConfig, run_pca

    result = run_pca(config_from_args(
        PcaConfig, args, methods=comma_list(args.methods),
        method_hparams=parse_method_hparams(args.method_hparams), progress=not args.no_progress,
    ))
    print(f"{result['module']}, {result['n']} forget samples; base PC1/PC2 explain "
          f"{100 * result['explained_variance_ratio'][0]:.1f}% / {100 * result['explained_variance_ratio'][1]:.1f}%")
    print(
        "| Method | mean displacement (base spreads) | moved variance fraction | in PC1-PC2 plane |\n|---|---|---|---|"
    )
    for name, m in result["methods"].items():
        print(
            f"| {name} | {m['mean_displacement']:.3f} | {m['moved_variance_fraction']:.3f} | "
            f"{m['displacement_in_pc_plane']:.3f} |"
        )
    for name, reason in result["skipped"].items():
        print(f"| {name} | {reason} | | |")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``pca`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "pca",
        help="PCA of the forget samples' MLP outputs at an edited layer, before and after each method",
        description="Writes OUT (PNG) and OUT with .json: 2-D coordinates on the base model's first two principal "
        "components and, per method, the mean displacement in base spreads and the fraction of variance moved.",
        parents=[parents.hparams("main ZeroUnlearn(-GD) YAML (model, statistics, layers)", required=True),
                 parents.model(), parents.data("forget dataset name or file", required=True),
                 parents.n("forget samples, edited as one batch (default 50)", default=50), parents.seed(),
                 parents.methods("bench methods (MEMIT/AlphaEdit need EasyEdit; skipped otherwise)",
                                 default=",".join(default_pca_methods())),
                 parents.method_hparams(),
                 parents.out("figure PNG (numbers go to the same name with .json)", required=True),
                 parents.device(), parents.progress()],
    )
    p.add_argument("--layer", type=int, default=None, help="layer to read (default: the YAML's last edited layer)")
    p.set_defaults(func=_cmd_pca)
