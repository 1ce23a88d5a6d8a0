"""Shared pieces of the ``zerounlearn`` subcommands: a parent parser per flag that several of them take (each
flag declared here once), argparse types, and the hparams loader.

A parent parser is built per call so that a subcommand can give the flag its own default, ``required`` or help
(``--n`` is 50 cases for ``bench``, 10 for ``audit``); a flag whose meaning differs (``unlearn --retain FILE``
vs ``bench --retain POLICY:K``) is not shared.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable, List, Optional, Type, TypeVar

from zerounlearn_editor.support.model_zoo import DTYPE_CHOICES

T = TypeVar("T")

DATA_DIR_HELP = ("benchmark data folder (counterfact/, zsre/, ...); default $ZEROUNLEARN_DATA_DIR, "
                 "else ../shared/data beside the working directory or the checkout")
RETAIN_POLICY_HELP = ("retain set of ZeroUnlearn-GD+R, K records per forget case drawn from the dataset but never "
                      "a scored case or a subject of a scored prompt: siblings:K = same-relation records; "
                      "same-answer:K = records with the case's true answer (same relation first, then any "
                      "relation), filled up with same-relation records")


def editing_methods_text() -> str:
    """The registered editing methods (:mod:`zerounlearn_editor.methods.registry`) as help text: ``A, B``."""
    from zerounlearn_editor.methods.registry import method_names

    return ", ".join(method_names())


def bench_rows_help(lead: str) -> str:
    """``lead`` followed by every bench row (``base`` and :func:`~zerounlearn_editor.harness.method_rows.row_names`,
    read from the method registry when the parser is built) and the bench-only rows, whose YAML only
    ``--method-hparams`` gives."""
    from zerounlearn_editor.harness.method_rows import row_names
    from zerounlearn_editor.methods.registry import registered_methods

    only = [e.name + s for e in registered_methods(baselines=True) for s, v in e.row_variants.items() if v is None]
    note = f" ({', '.join(only)}: bench-only, no shipped YAML; give it with --method-hparams ROW=PATH)" if only else ""
    return f"{lead}: {', '.join(row_names())}{note}"


def int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)


def positive_int_list(text: str) -> List[int]:
    """argparse type: ``"10,50,200"`` -> ``[10, 50, 200]``, an error quoting the option's value when a part is not
    a positive integer or nothing is given."""
    parts = comma_list(text)
    if not parts or not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise argparse.ArgumentTypeError(f"expected a comma list of positive integers, got {text!r}")
    return [int(part) for part in parts]


def load_hparams(path: str) -> Any:
    """The hyperparameters of the registered editing method the YAML at ``path`` names (its ``alg_name``)."""
    from zerounlearn_editor.methods.registry import load_method

    return load_method(path)[0]


def comma_list(text: str) -> List[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [item.strip() for item in text.split(",") if item.strip()]


def comma_option(text: str) -> str:
    """argparse ``type`` of a comma-list option: ``text`` unchanged, an error when it names nothing (``""``,
    ``" , "``), which would otherwise drop the option's output or fall back to its default in silence."""
    if not comma_list(text):
        raise argparse.ArgumentTypeError(
            f"empty value {text!r}: give a comma list, or leave the option out for its default"
        )
    return text


def config_from_args(cls: Type[T], args: argparse.Namespace, **given: Any) -> T:
    """``cls(**given)``, each other field of the dataclass ``cls`` from the same-named ``args`` attribute."""
    names = {f.name for f in dataclasses.fields(cls)} - set(given)  # type: ignore[arg-type]
    return cls(**given, **{name: getattr(args, name) for name in names if hasattr(args, name)})


def _shared(*names: str, **table: Any) -> Callable[..., argparse.ArgumentParser]:
    """A factory of parent parsers (``add_help=False``) of the flag ``names`` with the ``add_argument``
    settings ``table``; a call's ``help`` (its first argument) and keyword settings replace the table's."""

    def parent(help: Optional[str] = table.get("help"), **settings: Any) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(add_help=False)
        p.add_argument(*names, **{**table, "help": help, **settings})
        return p

    return parent


device = _shared("--device", default="cpu")
progress = _shared("--no-progress", action="store_true", help="no progress bars")
quiet = _shared("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars")
"""The subcommand's ``-q/--quiet`` (the top-level one's twin; its suppressed default never resets it)."""
dtype = _shared("--dtype", default=None, choices=DTYPE_CHOICES, help="load and edit the model in this "
                "precision (default: as stored); the solve runs in float64")
hparams = _shared("--hparams", default=None)
model = _shared("--model", default=None, help="model folder/name (default: the YAML's model_name)")
out = _shared("--out", default=None)
seed = _shared("--seed", type=int, default=0)
seeds = _shared("--seeds", default=None, type=comma_option)
n = _shared("--n", type=int, default=None)
methods = _shared("--methods", default=None, type=comma_option)
method_hparams = _shared("--method-hparams", action="append", default=[], metavar="NAME=PATH",
                         help="hparams YAML of one method (default hparams/<NAME>/<main file name>); "
                         "repeatable")
retain_policy = _shared("--retain", default=None, metavar="POLICY:K", help=RETAIN_POLICY_HELP)
corpus = _shared("--corpus", default=None, help="statistics corpus (default: the YAML's mom2_dataset)")
stats_dir = _shared("--stats-dir", default=None,
                    help="statistics cache folder (default: the YAML's stats_dir)")
data_dir = _shared("--data-dir", default=None, metavar="DIR", help=DATA_DIR_HELP)
"""``--data-dir``: ``main`` makes it the package's data folder before the command runs."""
batch_size = _shared("--batch-size", type=int, help="probes per forward pass")
include_unknown = _shared("--include-unknown", action="store_true")
width = _shared("--width", type=int, default=None)


def data(help: str, required: bool = False, default: Optional[str] = None) -> argparse.ArgumentParser:
    """``--data`` (dataset name or file) and ``--data-path``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--data", required=required, default=default, help=help)
    p.add_argument("--data-path", default=None, help="with a dataset name: the file to read instead of the default")
    return p


def known() -> argparse.ArgumentParser:
    """``--known-only`` and ``--known-min-accuracy``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--known-only", action="store_true",
                   help="sample only cases whose true answers the unedited model predicts (efficacy starts at 100)")
    p.add_argument("--known-min-accuracy", type=float, default=1.0,
                   help="with --known-only: the forget-prompt token accuracy a case needs (default 1.0)")
    return p


def ppl(tokens_default: Optional[int], tokens_help: str,
        text_help: str = "perplexity text (default: the embedded WikiText-2 test split)") -> argparse.ArgumentParser:
    """``--ppl-tokens`` (>= 0; 0 = off) and ``--ppl-text``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--ppl-tokens", type=nonnegative_int, default=tokens_default, help=tokens_help)
    p.add_argument("--ppl-text", default=None, help=text_help)
    return p
