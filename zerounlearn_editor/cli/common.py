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

T = TypeVar("T")

DATA_DIR_HELP = ("benchmark data folder (counterfact/, zsre/, ...); default $ZEROUNLEARN_DATA_DIR, "
                 "else ../shared/data beside the working directory or the checkout")
RETAIN_POLICY_HELP = ("retain set of ZeroUnlearn-GD+R, K records per forget case drawn from the dataset but never "
                      "a scored case or a subject of a scored prompt: siblings:K = same-relation records; "
                      "same-answer:K = records with the case's true answer (same relation first, then any "
                      "relation), filled up with same-relation records")


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


def load_hparams(path: str) -> Any:
    """The ZeroUnlearn or ZeroUnlearn-GD hyperparameters of the YAML at ``path`` (by its ``alg_name``)."""
    from zerounlearn_editor.integrations.unlearn import load_method

    return load_method(path)[0]


def comma_list(text: str) -> List[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [item.strip() for item in text.split(",") if item.strip()]


def config_from_args(cls: Type[T], args: argparse.Namespace, **given: Any) -> T:
    """``cls(**given)``, each other field of the dataclass ``cls`` from the same-named ``args`` attribute."""
    names = {f.name for f in dataclasses.fields(cls)} - set(given)  # type: ignore[arg-type]
    return cls(**given, **{name: getattr(args, name) for name in names if hasattr(args, name)})


def _flag(*names: str, **settings: Any) -> argparse.ArgumentParser:
    """A parent parser (``add_help=False``) of one flag; the arguments are those of ``add_argument``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(*names, **settings)
    return p


def device(default: Optional[str] = "cpu", help: Optional[str] = None) -> argparse.ArgumentParser:
    """``--device`` (torch device of the model)."""
    return _flag("--device", default=default, help=help)


def progress() -> argparse.ArgumentParser:
    """``--no-progress``."""
    return _flag("--no-progress", action="store_true", help="no progress bars")


def quiet() -> argparse.ArgumentParser:
    """The subcommand's ``-q/--quiet`` (same as the top-level one; suppressed default so it never resets it)."""
    return _flag("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars")


def dtype(checked: bool = True, help: Optional[str] = None) -> argparse.ArgumentParser:
    """``--dtype``: the precision the model is loaded (and edited) in; ``checked``: only the known dtypes."""
    from zerounlearn_editor.support.model_zoo import DTYPE_CHOICES

    help = help or "load and edit the model in this precision (default: as stored); the solve runs in float64"
    return _flag("--dtype", default=None, choices=DTYPE_CHOICES if checked else None, help=help)


def hparams(help: Optional[str], required: bool = False) -> argparse.ArgumentParser:
    """``--hparams`` (a ZeroUnlearn(-GD) YAML)."""
    return _flag("--hparams", required=required, default=None, help=help)


def model(help: str = "model folder/name (default: the YAML's model_name)",
          required: bool = False) -> argparse.ArgumentParser:
    """``--model`` (model folder or hub name)."""
    return _flag("--model", required=required, default=None, help=help)


def out(help: Optional[str], required: bool = False, default: Optional[str] = None,
        metavar: Optional[str] = None) -> argparse.ArgumentParser:
    """``--out`` (output file or folder)."""
    return _flag("--out", required=required, default=default, metavar=metavar, help=help)


def data(help: str, required: bool = False, default: Optional[str] = None) -> argparse.ArgumentParser:
    """``--data`` (dataset name or file) and ``--data-path``."""
    p = _flag("--data", required=required, default=default, help=help)
    p.add_argument("--data-path", default=None, help="with a dataset name: the file to read instead of the default")
    return p


def seed(help: Optional[str] = None) -> argparse.ArgumentParser:
    """``--seed`` (integer, default 0)."""
    return _flag("--seed", type=int, default=0, help=help)


def seeds(help: str, default: Optional[str] = None) -> argparse.ArgumentParser:
    """``--seeds`` (e.g. ``1-10`` or ``1,2,5``)."""
    return _flag("--seeds", default=default, help=help)


def n(help: str, default: Optional[int] = None, type: Callable[[str], int] = int) -> argparse.ArgumentParser:
    """``--n`` (how many cases / facts / passages)."""
    return _flag("--n", type=type, default=default, help=help)


def methods(help: Optional[str], default: Optional[str] = None) -> argparse.ArgumentParser:
    """``--methods`` (comma list of bench methods)."""
    return _flag("--methods", default=default, help=help)


def method_hparams() -> argparse.ArgumentParser:
    """``--method-hparams NAME=PATH`` (repeatable)."""
    return _flag("--method-hparams", action="append", default=[], metavar="NAME=PATH",
                 help="hparams YAML of one method (default hparams/<NAME>/<main file name>); repeatable")


def known() -> argparse.ArgumentParser:
    """``--known-only`` and ``--known-min-accuracy``."""
    p = _flag("--known-only", action="store_true", help="sample only cases whose true answers the unedited "
              "model predicts (efficacy starts at 100)")
    p.add_argument("--known-min-accuracy", type=float, default=1.0,
                   help="with --known-only: the forget-prompt token accuracy a case needs (default 1.0)")
    return p


def retain_policy(help: str = RETAIN_POLICY_HELP) -> argparse.ArgumentParser:
    """``--retain POLICY:K`` (the retain draw of ZeroUnlearn-GD+R)."""
    return _flag("--retain", default=None, metavar="POLICY:K", help=help)


def ppl(tokens_default: Optional[int], tokens_help: str,
        text_help: str = "perplexity text (default: the embedded WikiText-2 test split)") -> argparse.ArgumentParser:
    """``--ppl-tokens`` (>= 0; 0 = off) and ``--ppl-text``."""
    p = _flag("--ppl-tokens", type=nonnegative_int, default=tokens_default, help=tokens_help)
    p.add_argument("--ppl-text", default=None, help=text_help)
    return p


def corpus(help: str = "statistics corpus (default: the YAML's mom2_dataset)") -> argparse.ArgumentParser:
    """``--corpus`` (the C0 statistics corpus)."""
    return _flag("--corpus", default=None, help=help)


def stats_dir() -> argparse.ArgumentParser:
    """``--stats-dir`` (the statistics cache folder)."""
    return _flag("--stats-dir", default=None, help="statistics cache folder (default: the YAML's stats_dir)")


def data_dir(help: str = DATA_DIR_HELP, metavar: Optional[str] = "DIR") -> argparse.ArgumentParser:
    """``--data-dir`` (``main`` makes it the package's data folder before the command runs)."""
    return _flag("--data-dir", default=None, metavar=metavar, help=help)


def batch_size(default: int, help: Optional[str] = "probes per forward pass") -> argparse.ArgumentParser:
    """``--batch-size`` (probes per forward pass)."""
    return _flag("--batch-size", type=int, default=default, help=help)


def include_unknown(help: str) -> argparse.ArgumentParser:
    """``--include-unknown`` (also facts the model does not predict)."""
    return _flag("--include-unknown", action="store_true", help=help)


def width(help: str) -> argparse.ArgumentParser:
    """``--width`` (number of layers of the suggested window)."""
    return _flag("--width", type=int, default=None, help=help)
