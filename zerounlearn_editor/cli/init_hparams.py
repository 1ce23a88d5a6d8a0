"""``zerounlearn init-hparams``: a working ZeroUnlearn(-GD) YAML for a model no shipped file covers.

Module templates come from the loaded architecture; ``layers`` are given, or (``auto``) the causal
trace's suggested window (a stored ``trace.json``, or a fresh trace of facts the model knows);
``v_loss_layer`` is the last layer; everything else comes from the nearest shipped YAML of the method
(same module templates first, then the family's name in the file name, then the closest number of
layers; no ``-retain``/``-suppress``/``-deep`` variants), ``--deep`` applies the deep-forgetting keys
(:func:`~zerounlearn_editor.methods.zerounlearn_gd.config.deep_mode_settings`), and ``--set key=value``
overrides last. The result is checked with the method's strict loader, then written.
"""
from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml
from torch import nn

from zerounlearn_editor.cli.common import comma_option
from zerounlearn_editor.cli.trace import trace_facts_for
from zerounlearn_editor.engine.architectures import detect_templates
from zerounlearn_editor.engine.hparams import load_config_file
from zerounlearn_editor.methods.registry import get_method, method_names
from zerounlearn_editor.methods.zerounlearn_gd.config import deep_mode_settings
from zerounlearn_editor.support.resources import repo_root

LOG = logging.getLogger(__name__)
_TEMPLATE_KEYS = ("rewrite_module_tmp", "layer_module_tmp", "mlp_module_tmp", "ln_f_module", "lm_head_module")


def parse_layers(spec: str, num_layers: int) -> Optional[List[int]]:
    """``"auto"`` -> None; ``"3,4,5"`` or ``"3-5"`` -> the layers, each checked to be in range."""
    spec = spec.strip()
    if spec == "auto":
        return None
    try:
        if "-" in spec and "," not in spec:
            lo, hi = (int(x) for x in spec.split("-"))
            layers = list(range(lo, hi + 1))
        else:
            layers = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers must be auto, a,b,c or a-b; got {spec!r}") from None
    bad = [l for l in layers if not 0 <= l < num_layers]
    if not layers or bad:
        raise ValueError(f"--layers {spec!r}: layers {bad or '(none)'} are not in 0..{num_layers - 1}")
    return sorted(set(layers))


def parse_overrides(items: Sequence[str]) -> Dict[str, Any]:
    """``["key=value", ...]`` -> ``{key: yaml.safe_load(value)}``."""
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


VARIANT_MARKERS = ("-retain", "-suppress", "-deep", "-many")
"""Stem parts of shipped YAMLs that are measured variants of a paper YAML, not templates for a new model."""


def is_variant_yaml(path: Path) -> bool:
    """``<model>-retain*.yaml`` / ``-suppress.yaml`` / ``-deep.yaml`` / ``-many.yaml``: an
    opt-in variant of the paper's ``<model>.yaml``."""
    return any(marker in Path(path).stem for marker in VARIANT_MARKERS)


def nearest_shipped_yaml(method: str, templates: Mapping[str, Any]) -> Path:
    """The shipped ``hparams/<method's folder>/*.yaml`` closest to the model (see the module docstring)."""
    folder = repo_root() / "hparams" / get_method(method, "init-hparams --method").folder
    candidates = sorted(p for p in folder.glob("*.yaml") if not is_variant_yaml(p))
    if not candidates:
        raise FileNotFoundError(f"no shipped YAML of {method} in {folder}")
    family = str(templates.get("family", "")).rstrip("0123456789").lower()
    layers = int(templates["num_layers"])

    def distance(path: Path) -> Tuple[int, int, float, str]:
        config = load_config_file(path)
        same_templates = all(config.get(k) == templates.get(k) for k in _TEMPLATE_KEYS)
        named = bool(family) and family in path.stem.lower()
        ref_layers = int(config.get("v_loss_layer", 0)) + 1
        return (0 if same_templates else 1, 0 if named else 1, abs(math.log(max(ref_layers, 1) / layers)), path.name)

    return min(candidates, key=distance)


def build_hparams(
    model: nn.Module,
    model_name: str,
    method: str,
    layers: Sequence[int],
    overrides: Optional[Mapping[str, Any]] = None,
) -> Tuple[Dict[str, Any], Path]:
    """The YAML mapping for ``model`` and the shipped file it was based on (validated strictly)."""
    templates = detect_templates(model)
    base_path = nearest_shipped_yaml(method, templates)
    config = load_config_file(base_path)
    config.update({k: templates[k] for k in _TEMPLATE_KEYS})
    n_layers = int(templates["num_layers"])
    config.update(alg_name=method, model_name=model_name, layers=[int(l) for l in layers],
                  v_loss_layer=n_layers - 1)
    if isinstance(config.get("device"), int):
        import torch

        config["device"] = config["device"] if torch.cuda.is_available() else "cpu"
    config.update(dict(overrides or {}))
    bad = [l for l in config["layers"] if not 0 <= int(l) < n_layers]
    if bad:
        raise ValueError(f"layers {bad} are out of range for a {n_layers}-layer model")
    get_method(method).hparams_class.from_dict(config, source=f"init-hparams from {base_path.name}")
    return config, base_path


def write_hparams(config: Mapping[str, Any], base: Path, out: Union[str, Path], note: str = "") -> Path:
    """Write ``config`` as YAML (atomically) with a header saying where it came from; re-load it strictly."""
    from zerounlearn_editor.support.files import write_text_atomic

    header = (f"# Written by `zerounlearn init-hparams` from the shipped {base.parent.name}/{base.name}"
              f"{'; ' + note if note else ''}.\n"
              "# Module templates come from the loaded architecture; v_loss_layer is the last layer.\n")
    path = write_text_atomic(out, header + yaml.safe_dump(dict(config), sort_keys=False))
    get_method(config["alg_name"], f"{out}: key 'alg_name'").hparams_class.from_hparams(path)
    return path


MIN_TRACE_FACTS = 3
"""``--layers auto`` refuses a fresh trace of fewer answered facts than this (or than ``--trace-n``, if smaller): the
suggested window of one or two facts' indirect effects is noise."""


def check_out_file(out: Union[str, Path]) -> None:
    """``--out`` names a YAML file to write: not a folder (or a link to one), its parent not a file."""
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; init-hparams writes one YAML file: give a file path, "
                         f"e.g. --out {out / 'hparams.yaml'}")
    parent = out.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"--out {out}: {parent} is not a folder")


def check_layers_before_loss(layers: Sequence[int], num_layers: int, source: str) -> None:
    """The edited layers come before the model's last layer, whose output the target loss reads (``v_loss_layer``
    is the last layer in the written YAML); ``source`` names where the layers came from (an option)."""
    last = num_layers - 1
    if layers and max(layers) >= last:
        raise ValueError(
            f"{source}: layer {max(layers)} is the model's last layer (it has {num_layers} layers, 0..{last}); the "
            f"target loss reads the last layer's output, so the edited layers must come before it: choose layers in "
            f"0..{last - 1}"
        )


def facts_to_trace(path: Union[str, Path]) -> List[Any]:
    """The facts of a ``zerounlearn unlearn`` facts file that have an answer, as trace facts (read before any
    model loads; errors name the file, record and field)."""
    from zerounlearn_editor.applications.unlearn import load_facts
    from zerounlearn_editor.bench.trace import TraceFact

    facts = [TraceFact(r["prompt"], r["subject"], r["ground_truth"]) for r in load_facts(path) if r.get("ground_truth")]
    if not facts:
        raise ValueError(f"--facts {path}: no fact has an 'answer'; the trace measures the answer's probability")
    return facts


def auto_trace_facts(
    model: nn.Module, tok: Any, args: argparse.Namespace, given: Optional[List[Any]]
) -> Tuple[List[Any], str]:
    """The facts ``--layers auto`` traces and a note saying how many were usable: the ``--facts`` (``given``) or
    ``--trace-data`` facts the model answers, at most ``--trace-n``; too few answered ones are refused."""
    from zerounlearn_editor.bench.trace import answered_facts

    n = args.trace_n
    if given is not None:
        source = f"--facts {args.facts}"
        facts = given[:n] if args.include_unknown else answered_facts(model, tok, given, n)
        checked = f"{len(given)} in the file"
    else:
        source = f"--trace-data {args.trace_data}"
        facts = trace_facts_for(model, tok, args.trace_data, None, n, 0, args.include_unknown)
        checked = f"asked for {n}"
    kind = "facts" if args.include_unknown else "facts the model answers (first answer token its argmax)"
    minimum = min(MIN_TRACE_FACTS, n)
    if not args.include_unknown and len(facts) < minimum:
        raise ValueError(
            f"--layers auto: only {len(facts)} of the {len(given) if given is not None else 'checked'} facts of "
            f"{source} are answered by the model, fewer than the {minimum} a causal trace needs to suggest layers; "
            "give --facts with facts the model answers, or --layers explicitly (--include-unknown traces unanswered "
            "facts)"
        )
    if len(facts) < n:
        LOG.warning("--layers auto: tracing %d %s of %s (%s); the suggested layers rest on few facts", len(facts), kind,
                    source, checked)
    else:
        LOG.info("--layers auto: tracing %d %s of %s (%s)", len(facts), kind, source, checked)
    return facts, f"layers from a causal trace of {len(facts)} {kind} of {source} ({checked})"


def _cmd_init_hparams(args: argparse.Namespace) -> int:
    from zerounlearn_editor.bench.trace import TraceSettings, suggest_window, trace_facts
    from zerounlearn_editor.support.files import read_json
    from zerounlearn_editor.support.model_access import num_hidden_layers
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    if args.deep and args.method != "ZeroUnlearn-GD":
        raise ValueError(f"--deep is a ZeroUnlearn-GD mode; --method is {args.method}")
    check_out_file(args.out)
    if args.trace_n < 1:
        raise ValueError(f"--trace-n must be at least 1, got {args.trace_n}")
    if args.facts and args.layers.strip() != "auto":
        raise ValueError(f"--facts is read by --layers auto (the facts to trace); --layers is {args.layers!r}")
    if args.facts and args.trace:
        raise ValueError("--facts and --trace both choose the layers of --layers auto; give one")
    given = facts_to_trace(args.facts) if args.facts else None
    stored = (
        [int(l) for l in read_json(args.trace)["suggested_layers"]]
        if args.trace and args.layers.strip() == "auto"
        else None
    )
    overrides = {**(deep_mode_settings() if args.deep else {}), **parse_overrides(args.set)}
    model, tok = load_model_and_tokenizer(args.model, device=args.device)
    n_layers = num_hidden_layers(model)
    layers = parse_layers(args.layers, n_layers)
    note, source = f"layers given ({args.layers})", f"--layers {args.layers}"
    if layers is None:
        if stored is not None:
            layers = stored
            note, source = (
                f"layers from the causal trace {args.trace}",
                f"--trace {args.trace} (suggested layers {stored})",
            )
        else:
            width = args.width or len(
                load_config_file(nearest_shipped_yaml(args.method, detect_templates(model)))["layers"]
            )
            facts, note = auto_trace_facts(model, tok, args, given)
            result = trace_facts(model, tok, facts, TraceSettings(width=width), progress=not args.no_progress)
            # the loss reads the model's last layer, which must come after the edited ones
            layers = suggest_window(result["indirect_effect"]["mlp"][:-1], min(width, result["num_layers"] - 1))
    if "v_loss_layer" not in overrides:  # the written v_loss_layer is the last layer
        check_layers_before_loss(layers, n_layers, source)
    if args.deep:
        note += "; deep-forgetting keys (deep_mode_settings)"
    config, base = build_hparams(model, args.model, args.method, layers, overrides)
    path = write_hparams(config, base, args.out, note)
    print(
        f"{args.method} hparams for {args.model} ({config['rewrite_module_tmp']}), base {base.name}, {note} -> {path}"
    )
    print(f"layers: {config['layers']}")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``init-hparams`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "init-hparams",
        help="write a working ZeroUnlearn(-GD) YAML for a Hugging Face model (Llama, Mistral, Qwen2/3, Gemma, GPT-2)",
        parents=[parents.model("model folder/name", required=True),
                 parents.include_unknown("auto trace: use facts the model does not know too"),
                 parents.width("auto: number of layers (default: the nearest shipped YAML's)"),
                 parents.out("YAML file to write", required=True), parents.device(), parents.progress()],
    )
    p.add_argument("--method", required=True, choices=method_names())
    p.add_argument("--layers", type=comma_option, default="auto", help="auto (causal trace), a,b,c or a-b")
    p.add_argument(
        "--trace", default=None, help="with --layers auto: a trace.json of `zerounlearn trace` to take them from"
    )
    p.add_argument("--trace-data", default="counterfact", help="facts for the auto trace (default counterfact)")
    p.add_argument("--facts", default=None, metavar="FILE",
                   help="with --layers auto: trace these facts (a zerounlearn unlearn facts file; those the model "
                        "answers) instead of --trace-data")
    p.add_argument(
        "--trace-n", type=int, default=10, help="auto trace: at most this many facts the model answers (default 10)"
    )
    p.add_argument("--deep", action="store_true",
                   help="ZeroUnlearn-GD: the deep-forgetting mode's keys, as in the shipped <model>-deep.yaml files")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a key (YAML value); repeatable"
    )
    p.set_defaults(func=_cmd_init_hparams)
