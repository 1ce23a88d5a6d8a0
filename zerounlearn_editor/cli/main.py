"""The ``zerounlearn`` command (also ``python -m zerounlearn_editor``): the top-level parser and the dispatch.

Every subcommand has a ``register(sub, parents)`` (in a module of this package) that adds its parser
and handler; ``parents`` is :mod:`zerounlearn_editor.cli.common`, whose parent parsers declare the shared
flags once.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

from zerounlearn_editor.cli import (
    audit,
    bench,
    common,
    demo,
    init_hparams,
    pca,
    plot,
    prepare_model,
    retain_set,
    scale,
    stats,
    trace,
    unlearn,
    utility,
)

LOG = logging.getLogger("zerounlearn_editor.cli")

SUBCOMMANDS = (prepare_model.register, stats.register, demo.register, unlearn.register, bench.register,
               stats.register_merge, bench.register_speed, utility.register, trace.register,
               init_hparams.register, pca.register, plot.register, audit.register,
               scale.register, retain_set.register)
"""The ``register(sub, parents)`` of every subcommand, in the order ``zerounlearn --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    """The ``zerounlearn`` parser: global ``-v``/``-q`` and the subparsers that :data:`SUBCOMMANDS` add."""
    parser = argparse.ArgumentParser(prog="zerounlearn", description="ZeroUnlearn / ZeroUnlearn-GD fact unlearning")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars (logs still say what runs)")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in SUBCOMMANDS:
        register(sub, common)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand; 2 on a ValueError, a missing file or a
    refused (too disfluent) edit, which are logged."""
    from zerounlearn_editor.engine.fluency_guard import FluencyError

    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.quiet:
        from zerounlearn_editor.support.progress import set_progress

        set_progress(False)
    try:
        if getattr(args, "data_dir", None):
            from zerounlearn_editor.support.resources import set_data_dir

            LOG.info("benchmark data folder: %s", set_data_dir(args.data_dir))
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FluencyError) as exc:
        LOG.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
