"""``zerounlearn init-hparams``: a working ZeroUnlearn(-GD) YAML for a model no shipped file covers.

Module templates come from the model's architecture; ``layers`` are given, or (``auto``) the causal trace's suggested
window (a stored ``trace.json``, or a fresh MLP trace of facts the model knows, restoring a window of
:func:`~zerounlearn_editor.harness.causal_trace.depth_scaled_window` layers unless ``--trace-window`` says otherwise);
``v_loss_layer`` is the last layer; everything else comes from the nearest shipped YAML of the method (same module
templates first, then the family's name in the file name, then the closest number of layers; no opt-in variants),
except, when the weights are read (``--layers auto`` with a fresh trace, or ``--measure``) and no shipped YAML is the
model's own (:func:`own_shipped_yaml`; ``--unseen`` ignores it), the scale-dependent keys: ``v_lr``,
``clamp_norm_factor``, ``norm_weight``, ``nullspace_threshold`` and the ``mom2`` sample sizes follow
:mod:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules` from the model's measured residual RMS (``--many``'s
answer-suppression targets, and the plain and ``--retain`` YAMLs behind a post-MLP norm: its median absolute
coordinate), key covariance
median eigenvalue and post-MLP norm (:func:`~zerounlearn_editor.harness.model_scales.measure_scales`, 50 passages) at
the layers the written YAML edits (``--many``, ``--robust``: the widened span, then its ``norm_weight`` x 3/10); the
YAML's header gives the measured values (and the keys set by rule that ``--set`` replaced). The plain ZeroUnlearn-GD
YAML of such a model whose MLP output passes a norm (Gemma-2/3) also gets the text weight by key reach
(:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_text_weight`; ``--set nullspace_text_weight=null``
gives the paper's penalty back) and the target settings measured behind such a norm: ``v_lr`` by the median
coordinate, 75 target steps, one repair round
(:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_post_norm_targets`); its ``--many`` YAML takes
Gemma-3-270m's measured ``-many.yaml`` settings
(:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_post_norm_many`), its ``--retain`` YAML the same
keys as the plain one with the retain key
(:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_post_norm_retain`).
``--many`` / ``--deep`` / ``--retain`` / ``--robust`` apply one opt-in variant's rule, ``--many --retain`` together the
many-facts retain rule (:mod:`~zerounlearn_editor.methods.zerounlearn_gd.variants`), and ``--set key=value``
overrides last. The result is
checked with the method's strict loader, then written. Only a fresh trace loads the weights: otherwise the model is
built from its config on the meta device (templates and depth need no weights).
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
from zerounlearn_editor.methods.zerounlearn_gd.scale_rules import (
    POST_NORM_MANY,
    POST_NORM_MANY_MEASURED_ON,
    POST_NORM_TARGETS,
    POST_NORM_TARGETS_MEASURED_ON,
)
from zerounlearn_editor.methods.zerounlearn_gd.variants import (
    RETAIN_MANY,
    VARIANTS,
    check_variants,
    many_layers,
    variant_flags,
    variant_settings,
)
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


def overridden_note(rules: Mapping[str, Any], overrides: Mapping[str, Any]) -> str:
    """A header sentence naming the keys set by rule that ``--set`` replaced (``key rule -> given``), or ``""``: the
    header's "Settings by rule" line lists what the rules gave, the YAML below it what was written."""
    changed = [f"{key} {rules[key]} -> {overrides[key]}" for key in rules
               if key in overrides and overrides[key] != rules[key]]
    return f" --set replaced keys set by rule: {', '.join(changed)}." if changed else ""


VARIANT_MARKERS = ("-retain", "-suppress", "-deep", "-many", "-robust", "-rules")
"""Stem parts of shipped YAMLs that are measured variants of a paper YAML, or (``-rules``) what this command's rules
wrote for a model without a paper YAML: not templates for a new model."""


def is_variant_yaml(path: Path) -> bool:
    """``<model>-retain*.yaml`` / ``-suppress.yaml`` / ``-deep.yaml`` / ``-many.yaml`` / ``-robust.yaml``: an
    opt-in variant of the paper's ``<model>.yaml``; ``<model>-rules.yaml``: init-hparams' output for a model with no
    paper YAML (Gemma-3-270m)."""
    return any(marker in Path(path).stem for marker in VARIANT_MARKERS)


def _paper_yamls(method: str) -> List[Path]:
    folder = repo_root() / "hparams" / get_method(method, "init-hparams --method").folder
    return sorted(p for p in folder.glob("*.yaml") if not is_variant_yaml(p))


def own_shipped_yaml(method: str, model_name: str) -> Optional[Path]:
    """The shipped paper YAML of ``method`` that is the model's own, or None: its file stem, or the last part of its
    ``model_name``, equals (case-insensitively) the last part of ``model_name`` (a folder, hub name or zoo alias;
    ``~/.cache/.../SmolLM2-135M-Instruct`` and ``smollm2`` name SmolLM2-135M-Instruct.yaml)."""
    name = str(model_name).rstrip("/").replace("\\", "/").split("/")[-1].lower()
    for path in _paper_yamls(method):
        shipped = str(load_config_file(path).get("model_name", "")).rstrip("/").split("/")[-1].lower()
        if name and name in (path.stem.lower(), shipped):
            return path
    return None


def nearest_shipped_yaml(method: str, templates: Mapping[str, Any], exclude: Optional[Path] = None) -> Path:
    """The shipped ``hparams/<method's folder>/*.yaml`` closest to the model (see the module docstring), ``exclude``
    (the model's own, under ``--unseen``) left out."""
    folder = repo_root() / "hparams" / get_method(method, "init-hparams --method").folder
    candidates = [p for p in _paper_yamls(method) if exclude is None or p.resolve() != Path(exclude).resolve()]
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
    variant: Optional[str] = None,
    rules: Optional[Mapping[str, Any]] = None,
    exclude: Optional[Path] = None,
) -> Tuple[Dict[str, Any], Path]:
    """The YAML mapping for ``model`` and the shipped file it was based on (validated strictly): the nearest paper
    YAML (not ``exclude``) with the model's templates, ``layers`` and last layer as ``v_loss_layer``; then ``rules``
    (:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_settings`); then ``variant``'s keys
    (:func:`~zerounlearn_editor.methods.zerounlearn_gd.variants.variant_settings` of that mapping); then
    ``overrides``."""
    templates = detect_templates(model)
    base_path = nearest_shipped_yaml(method, templates, exclude)
    config = load_config_file(base_path)
    config.update({k: templates[k] for k in _TEMPLATE_KEYS})
    n_layers = int(templates["num_layers"])
    config.update(alg_name=method, model_name=model_name, layers=[int(l) for l in layers],
                  v_loss_layer=n_layers - 1)
    config.update(dict(rules or {}))
    if isinstance(config.get("device"), int):
        import torch

        config["device"] = config["device"] if torch.cuda.is_available() else "cpu"
    if variant is not None:
        config.update(variant_settings(variant, config, n_layers))
    config.update(dict(overrides or {}))
    bad = [l for l in config["layers"] if not 0 <= int(l) < n_layers]
    if bad:
        raise ValueError(f"layers {bad} are out of range for a {n_layers}-layer model")
    get_method(method).hparams_class.from_dict(config, source=f"init-hparams from {base_path.name}")
    return config, base_path


def write_hparams(config: Mapping[str, Any], base: Path, out: Union[str, Path], note: str = "",
                  variant: Optional[str] = None, rules_note: str = "", measured_on: Optional[str] = None) -> Path:
    """Write ``config`` as YAML (atomically) with a header saying where it came from (the settings by rule and
    the measured quantities, ``rules_note``; for an opt-in ``variant``, that its keys are derived by rule, not
    measured, or, ``measured_on``, on which model's file its rule was measured; for the plain YAML, ``measured_on``
    names where its target settings behind a post-MLP norm were measured); re-load it strictly."""
    from zerounlearn_editor.support.files import write_text_atomic

    header = (f"# Written by `zerounlearn init-hparams` from the shipped {base.parent.name}/{base.name}"
              f"{'; ' + note if note else ''}.\n"
              "# Module templates come from the model's architecture; v_loss_layer is the last layer.\n")
    if variant is not None and measured_on:
        header += (f"# -{variant}: derived by init-hparams {variant_flags(variant)}; its keys behind the post-MLP norm "
                   f"are the settings measured on {measured_on}, applied by rule to any model behind such a norm, "
                   f"unless --set replaced them (named below) (rules: zerounlearn init-hparams --help).\n")
    elif variant is not None:
        header += (f"# -{variant}: derived by init-hparams {variant_flags(variant)} from the model's config; not "
                   f"measured on real weights (rules: zerounlearn init-hparams --help).\n")
    elif measured_on:
        header += (f"# Behind the post-MLP norm, v_lr (by the median coordinate), v_num_grad_steps and repair_rounds "
                   f"are the settings measured on {measured_on}, applied by rule to any model behind such a norm, "
                   f"unless --set replaced them (named below) (rules: zerounlearn init-hparams --help).\n")
    if rules_note:
        header += f"# {rules_note}\n"
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
    from zerounlearn_editor.harness.causal_trace import TraceFact

    facts = [TraceFact(r["prompt"], r["subject"], r["ground_truth"]) for r in load_facts(path) if r.get("ground_truth")]
    if not facts:
        raise ValueError(f"--facts {path}: no fact has an 'answer'; the trace measures the answer's probability")
    return facts


def auto_trace_facts(
    model: nn.Module, tok: Any, args: argparse.Namespace, given: Optional[List[Any]]
) -> Tuple[List[Any], str]:
    """The facts ``--layers auto`` traces and a note saying how many were usable: the ``--facts`` (``given``) or
    ``--trace-data`` facts the model answers, at most ``--trace-n``; too few answered ones are refused."""
    from zerounlearn_editor.harness.causal_trace import answered_facts

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


def load_model_structure(name: str) -> nn.Module:
    """The model's modules built from its config on the meta device, no weight read (what the module templates and
    the layer count need): ``name`` is a zoo alias, a folder with a ``config.json``, or a hub name in the cache."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from zerounlearn_editor.support.model_zoo import resolve_model_path
    from zerounlearn_editor.support.offline import split_hub_name

    path = resolve_model_path(name)
    local = Path(path).exists() or split_hub_name(str(name))[1]
    config = AutoConfig.from_pretrained(path, **({} if local else {"local_files_only": True}))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return model.eval()


def check_init_args(args: argparse.Namespace) -> Optional[str]:
    """Refuse inconsistent options before any model loads (one-line errors naming them); the chosen variant."""
    variant = check_variants([v for v in VARIANTS if getattr(args, v)], args.method)
    check_out_file(args.out)
    if args.trace_n < 1:
        raise ValueError(f"--trace-n must be at least 1, got {args.trace_n}")
    auto = args.layers.strip() == "auto"
    if args.facts and not auto:
        raise ValueError(f"--facts is read by --layers auto (the facts to trace); --layers is {args.layers!r}")
    if args.facts and args.trace:
        raise ValueError("--facts and --trace both choose the layers of --layers auto; give one")
    if args.trace_window is not None:
        if args.trace_window < 1:
            raise ValueError(f"--trace-window must be at least 1, got {args.trace_window}")
        if not auto or args.trace:
            raise ValueError("--trace-window is read by a fresh trace (--layers auto without --trace); "
                             f"--layers is {args.layers!r}{', --trace ' + str(args.trace) if args.trace else ''}")
    return variant


def traced_layers(model: nn.Module, tok: Any, args: argparse.Namespace, given: Optional[List[Any]],
                  n_layers: int) -> Tuple[List[int], str]:
    """``--layers auto`` by a fresh MLP trace: the best window of ``--width`` (default: the nearest shipped YAML's
    count) layers before the last, restoring ``--trace-window`` layers together (default
    :func:`~zerounlearn_editor.harness.causal_trace.depth_scaled_window`); the layers and a note for the header."""
    from zerounlearn_editor.harness.causal_trace import depth_scaled_window

    width = args.width or default_width(model, args.method)
    window = args.trace_window or depth_scaled_window(n_layers)
    facts, note = auto_trace_facts(model, tok, args, given)
    layers = trace_layers(model, tok, facts, window, width, progress=not args.no_progress)
    rule = "--trace-window" if args.trace_window else "10 x layers / 48"
    return layers, f"{note}, restoration window {window} ({rule})"


def default_width(model: nn.Module, method: str) -> int:
    """How many layers ``--layers auto`` picks without ``--width``: the nearest shipped YAML's count."""
    return len(load_config_file(nearest_shipped_yaml(method, detect_templates(model)))["layers"])


def trace_layers(model: nn.Module, tok: Any, facts: Sequence[Any], window: int, width: int,
                 progress: bool = False) -> List[int]:
    """The best ``width`` contiguous layers before the last by an MLP causal trace of ``facts`` (trace facts),
    restoring ``window`` layers together."""
    from zerounlearn_editor.harness.causal_trace import TraceSettings, suggest_window, trace_facts

    result = trace_facts(model, tok, list(facts), TraceSettings(window=window, width=width), progress=progress,
                         kinds=("mlp",))
    # the loss reads the model's last layer, which must come after the edited ones
    return suggest_window(result["indirect_effect"]["mlp"][:-1], min(width, result["num_layers"] - 1))


def scale_rules_for(model: nn.Module, tok: Any, layers: Sequence[int], plain: bool = False,
                    suppress_targets: bool = False, many: bool = False,
                    retain: bool = False) -> Tuple[Dict[str, Any], str]:
    """The keys the setting rules give for ``model`` at ``layers`` (measured on its weights) and a header line;
    ``plain`` (ZeroUnlearn-GD's YAML without a variant) and ``retain`` (``--retain``): also the text weight and the
    target settings behind a post-MLP norm
    (:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_post_norm_retain`);
    ``suppress_targets`` (``--many``): ``v_lr`` by the rule of answer-suppression targets; ``many`` (``--many``): its
    keys behind a post-MLP norm (:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_post_norm_many`)."""
    from zerounlearn_editor.harness.model_scales import SCALE_PASSAGES, measure_scales
    from zerounlearn_editor.methods.zerounlearn_gd.scale_rules import (
        describe_rules,
        rule_post_norm_many,
        rule_post_norm_retain,
        rule_settings,
    )

    templates = detect_templates(model)
    scales = measure_scales(model, tok, layers, templates["layer_module_tmp"], templates["rewrite_module_tmp"])
    rules = rule_settings(scales, suppress_targets=suppress_targets)
    if plain or retain:  # the same keys for both: the text weight and, behind a post-MLP norm, the target settings
        rules.update(rule_post_norm_retain(scales))
    if many:
        rules.update(rule_post_norm_many(scales))
    LOG.info("settings by rule: %s (%s)", rules, describe_rules(scales))
    keys = ", ".join(f"{k} {v}" for k, v in rules.items())
    return rules, (f"Settings by rule (scale_rules; {SCALE_PASSAGES} passages of wiki_passages_3643): {keys}; from "
                   f"{describe_rules(scales)}.")


def _cmd_init_hparams(args: argparse.Namespace) -> int:
    from zerounlearn_editor.support.files import read_json
    from zerounlearn_editor.support.model_access import num_hidden_layers
    from zerounlearn_editor.support.model_zoo import check_device, load_model_and_tokenizer

    variant = check_init_args(args)
    given = facts_to_trace(args.facts) if args.facts else None
    auto = args.layers.strip() == "auto"
    stored = [int(l) for l in read_json(args.trace)["suggested_layers"]] if args.trace and auto else None
    overrides = parse_overrides(args.set)
    own = own_shipped_yaml(args.method, args.model)
    measure = (auto and stored is None) or args.measure  # the weights are read
    if (auto and stored is None) or (args.measure and (own is None or args.unseen)):
        model, tok = load_model_and_tokenizer(args.model, device=args.device)
    else:
        check_device(args.device)
        model, tok = load_model_structure(args.model), None
    n_layers = num_hidden_layers(model)
    layers = parse_layers(args.layers, n_layers)
    note, source = f"layers given ({args.layers})", f"--layers {args.layers}"
    if layers is None and stored is not None:
        layers = stored
        note, source = f"layers from the causal trace {args.trace}", f"--trace {args.trace} (suggested layers {stored})"
    elif layers is None:
        layers, note = traced_layers(model, tok, args, given, n_layers)
    if "v_loss_layer" not in overrides:  # the written v_loss_layer is the last layer
        check_layers_before_loss(layers, n_layers, source)
    if variant is not None:
        note += f"; {VARIANT_NOTES[variant]} ({variant_flags(variant)})"
    rules, rules_note = {}, ""
    if measure and (own is None or args.unseen):  # measured where the written YAML edits (widened: --many, --robust)
        edited = many_layers(layers, n_layers) if variant in ("many", RETAIN_MANY, "robust") else layers
        suppress = variant == "many" and overrides.get("target_objective", "suppress_answer") == "suppress_answer"
        rules, rules_note = scale_rules_for(model, tok, edited, plain=args.method == "ZeroUnlearn-GD" and not variant,
                                            suppress_targets=suppress, many=suppress, retain=variant == "retain")
    elif own is not None and not args.unseen:
        LOG.info("%s is the model's own shipped YAML: no settings by rule (--unseen applies them)", own.name)
    rules_note += overridden_note(rules, overrides)
    config, base = build_hparams(model, args.model, args.method, layers, overrides, variant, rules,
                                 own if args.unseen else None)
    measured_on = (POST_NORM_MANY_MEASURED_ON if POST_NORM_MANY.keys() <= rules.keys()  # rule_post_norm_many applied
                   else POST_NORM_TARGETS_MEASURED_ON if POST_NORM_TARGETS.keys() <= rules.keys() else None)
    path = write_hparams(config, base, args.out, note, variant, rules_note, measured_on)
    print(
        f"{args.method} hparams for {args.model} ({config['rewrite_module_tmp']}), base {base.name}, {note} -> {path}"
    )
    print(f"layers: {config['layers']}")
    return 0


VARIANT_NOTES = {"many": "many-facts keys", "deep": "deep-forgetting keys", "retain": "retain-aware keys",
                 "robust": "robust-forgetting keys",
                 RETAIN_MANY: "many-facts retain-aware keys"}
VARIANT_HELP = {
    "many": "ZeroUnlearn-GD, one batch of many facts (as SmolLM2-135M-Instruct-many.yaml): the layers widen downward "
            "from the last chosen layer to round(7 x layers / 30) of them (SmolLM2: 16-18 -> 12-18 of 30), "
            "orthogonality_weight 0, target_objective suppress_answer stopped at v_early_stop_loss 0.01, norm_weight "
            "the base YAML's x 3/10, suppress_rank_limit 0 (only facts the model gives take target steps; with --set "
            "target_objective=neutral also --set suppress_rank_limit=null); with --measure, v_lr by the residual's "
            "median coordinate (the rule of answer-suppression targets), and where the MLP output passes a norm "
            "(Gemma-2/3) contexts 2 of 5 tokens, nullspace_threshold x10, nullspace_text_weight 200, repair_rounds 1 "
            "and retain_nullspace_weight 0.1 (gemma-3-270m-many.yaml's measured settings, with suppression targets "
            "only; give the retain set at edit time: --many --retain writes the SmolLM2-derived retain-many keys)",
    "deep": "ZeroUnlearn-GD, forgetting that survives in-context examples (as the shipped <model>-deep.yaml): the "
            "deep-mode keys (8 context templates of 10 tokens, 50 target steps, clamp 1.5, stop 0.005, 4 few-shot "
            "prefixes)",
    "robust": "ZeroUnlearn-GD, forgetting that multiple choice, fine-tuning and int4 rounding do not bring back, "
              "with a retain set (as SmolLM2-135M-Instruct-robust.yaml): --many --retain's keys, 50 target steps, "
              "rank_below_alternatives {weight 1, margin 8, k 3}, quantized_forget_keys {int4, 1} (the ranking acts "
              "where the edit holds other answers)",
    "retain": "ZeroUnlearn-GD, keep named facts (as the shipped <model>-retain.yaml): retain_nullspace_weight 0.1, "
              "retain_file null (give the retain set at edit time); where the weights are read (--measure, or a "
              "fresh --layers auto trace) and the MLP output passes a norm (Gemma-2/3), also the text weight by key "
              "reach, v_lr by the residual's median coordinate, 75 target steps and repair_rounds 1 (the plain "
              "YAML's there; gemma-3-270m-retain.yaml's measured settings); with --many, many facts with a retain "
              "set (as SmolLM2-135M-Instruct-retain-many.yaml): --many's layers, targets and norm_weight (every fact "
              "stepping), orthogonality_weight kept, v_early_stop_loss 0.003, the retain keys and "
              "context_nullspace_weight 0.1",
}


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``init-hparams`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "init-hparams",
        help="write a working ZeroUnlearn(-GD) YAML for a Hugging Face model (Llama, Mistral, Qwen2/3, Gemma, GPT-2)",
        description="Module templates from the model's architecture, v_loss_layer its last layer, the rest from the "
        "nearest shipped paper YAML. --layers auto: a causal trace of facts the model answers (MLP outputs restored "
        "over a window of round(10 x layers / 48) layers around each one, --trace-window to change it) suggests the "
        "best --width contiguous layers before the last. --many / --deep / --retain / --robust: one opt-in variant's "
        "keys by the rules below (--many --retain: the many-facts retain keys) (SmolLM2's shipped -many / -deep / "
        "-retain / -retain-many / -robust files follow from its paper YAML by them). Only "
        "a fresh trace or --measure loads weights; otherwise the model is built from its config. With the weights, "
        "a model whose own paper YAML does not ship (--unseen: as if it did not) gets v_lr = 0.5 x residual RMS / "
        "8.366, norm_weight = 1000 x and nullspace_threshold = 3e-2 x (C0 median eigenvalue / 0.01582), "
        "clamp_norm_factor = min(0.75, sum |post-MLP norm output| / |residual|) and 400 x d_in / 1536 statistics "
        "passages of 128 tokens (SmolLM2-135M-Instruct's shipped settings rescaled; measured on 50 passages); the "
        "context prefixes stay the base YAML's; where its MLP output passes a norm (Gemma-2/3), its plain "
        "ZeroUnlearn-GD YAML (no variant) also gets nullspace_text_weight {key_reach: 0.6} (--set "
        "nullspace_text_weight=null: the paper's penalty) and the target settings measured on Gemma-3-270m (v_lr "
        "0.5 x the residual's median coordinate / 2.898, 75 target steps, repair_rounds 1), its --many YAML "
        "Gemma-3-270m's measured -many settings (contexts 2 of 5 among them; see --many), and its --retain YAML "
        "the plain YAML's keys with the retain key (see --retain).",
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
    p.add_argument("--trace-window", type=int, default=None, metavar="N",
                   help="auto trace: MLP outputs restored together around each layer (default: ROME's 10 of GPT-2 "
                        "XL's 48 layers scaled to the depth, round(10 x layers / 48), at least 1: 4 on 18 layers, "
                        "6 on 30; 1 restores each layer alone)")
    for name in VARIANTS:
        p.add_argument(f"--{name}", action="store_true",
                       help=VARIANT_HELP[name] + "; one variant at a time (but --many --retain); the header says how "
                            "its keys were set (derived by rule, or measured where it names the model)")
    p.add_argument("--measure", action="store_true",
                   help="with given layers: read the weights and set v_lr, clamp_norm_factor, norm_weight, "
                        "nullspace_threshold and the mom2 sizes by the setting rules (behind a post-MLP norm also "
                        "the plain YAML's text weight and target settings, --many's and --retain's measured keys), "
                        "measured at the layers the written YAML edits (--many: the widened span) (always with a "
                        "fresh --layers auto trace; never for a model whose own YAML ships, unless --unseen)")
    p.add_argument("--unseen", action="store_true",
                   help="treat a model whose own paper YAML ships (e.g. SmolLM2-135M-Instruct) as unseen: its YAML "
                        "is not a base, and the setting rules apply where the weights are read")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a key (YAML value); repeatable"
    )
    p.set_defaults(func=_cmd_init_hparams)
