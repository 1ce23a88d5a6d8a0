"""Hyperparameter dataclasses and their strict YAML/JSON loader.

A method config is a dataclass whose fields are exactly its YAML's keys. A missing required key, an unknown
or repeated key, a wrong type, a non-finite number or a value out of range raises :class:`HParamsError`
naming the file, the key and the value; a retired key fails with its :data:`RETIRED_KEYS` message. Every key
has help text (:data:`SHARED_KEY_HELP` plus each method config's ``KEY_HELP``; the README key table is
generated from it by :mod:`zerounlearn_editor.cli.hparams_doc`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Literal, Optional, Union, get_args, get_origin, get_type_hints

import yaml

_SCI_NOTATION = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


class HParamsError(ValueError):
    """A hyperparameter file or value is invalid (message names the file and key)."""


_GD_RETAIN = "ZeroUnlearn-GD with retain_nullspace_weight (hparams/ZeroUnlearn-GD/<model>-retain.yaml)"
RETIRED_KEYS: Dict[str, str] = {
    # key (or "key: value" for a retired value) -> why it was retired and what to use instead;
    # the numbers stay in benchmarks/notebook/
    "targets_optimizer: lbfgs": "its edits forget less at n = 50 (benchmarks/notebook/2026-11-23-targets-optimizer-speed.md); "
    "use targets_optimizer: adam_kv (the default)",
    "target_retain_weight": "retain-aware neutral targets did not change Eff/Spe after the solve "
    f"(benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); delete the key; to keep facts use {_GD_RETAIN}",
    "target_retain_neighbours": "part of the retain-aware targets of target_retain_weight (benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); "
    f"delete the key; to keep facts use {_GD_RETAIN}",
    "target_retain_scale": "part of the retain-aware targets of target_retain_weight (benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); "
    f"delete the key; to keep facts use {_GD_RETAIN}",
    "utility_penalty_weight": "the soft C0 penalty only traded forgetting for fluency along the null space's own front "
    "(benchmarks/notebook/2026-11-23-surgical-diagnosis-ablation.md); delete the key; use nullspace_threshold / norm_weight",
    "retain_penalty_weight": "a soft retain penalty added nothing over the hard null space "
    f"(benchmarks/notebook/2026-11-23-surgical-diagnosis-ablation.md); delete the key; use {_GD_RETAIN}",
    "projection_utility_weight": "the C0-aware projector forgot less (benchmarks/notebook/2026-11-23-surgical-diagnosis-ablation.md); "
    "delete the key (ZeroUnlearn uses the paper's projector)",
    "context_positions": "'subject' did not win on report data (benchmarks/notebook/2026-11-23-surgical-tuning-waves.md) and "
    "'all' is what context_nullspace_weight protects; delete the key",
    "retain_weight": "part of ZeroUnlearn+R, which ZeroUnlearn-GD+R beats at every n measured and which breaks fluency "
    f"beyond ~50 facts (benchmarks/RESULTS.md, 'Surgical forgetting'); use {_GD_RETAIN}",
    "projection_retain_weight": "part of ZeroUnlearn+R, which ZeroUnlearn-GD+R beats at every n measured "
    f"(benchmarks/RESULTS.md, 'Surgical forgetting'); use {_GD_RETAIN}",
    # settings every shipped YAML held at one value (issue 27: at most 48 keys); the value is now fixed
    "context_seed": "the context prefixes are always sampled with seed 0 (zerounlearn_editor.engine.contexts.CONTEXT_SEED, "
    "the value of every shipped YAML); delete the key",
    "mom2_batch_size": "the statistics pass always reads 16 passages per forward pass "
    "(zerounlearn_editor.engine.stats.STATS_BATCH_SIZE, the value of every shipped YAML; C0 does not depend on it); delete the key",
    "projection_eps": "ZeroUnlearn always uses the paper's exact projector P = I - V V^T (eps 0, the value of every shipped "
    "YAML; eps > 0 made the edit full rank, so no adapter); delete the key",
    "gd_tolerance": "solver: gd always stops at a relative change of 1e-10 "
    "(zerounlearn_editor.methods.zerounlearn_gd.method.GD_TOLERANCE, the value of every shipped YAML); delete the key",
}
"""Retired hyperparameters: a file that still sets one fails with this message (see :func:`retired_key_errors`)."""


def retired_key_errors(config: Dict[str, Any], known: Any) -> List[str]:
    """One message per retired key (not in ``known``, the class's fields) or retired value in ``config``."""
    errors = []
    for key, value in config.items():
        for entry in (key, f"{key}: {value}" if isinstance(value, str) else None):
            if entry in RETIRED_KEYS and (entry != key or key not in known):
                errors.append(f"{entry!r} was retired: {RETIRED_KEYS[entry]}")
    return errors


def _convert_scientific_strings(config: Dict[str, Any]) -> Dict[str, Any]:
    """YAML 1.1 reads ``1e-3`` as a string; turn such strings into floats."""
    return {key: float(value) if isinstance(value, str) and _SCI_NOTATION.match(value.strip()) else value
            for key, value in config.items()}


class UniqueKeySafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: Dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {line}; first given on line {seen[key]})", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def unique_json_pairs(pairs):
    """``object_pairs_hook`` for :func:`json.loads` that rejects a key given twice in one object."""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise json.JSONDecodeError(f"duplicate key(s) {repeated}", "", 0)
    return dict(pairs)


def load_config_file(path: Union[str, Path]) -> Dict[str, Any]:
    """Read a YAML or JSON mapping from ``path`` (``.yaml`` appended without a suffix, as EasyEdit does);
    a key given twice is an error."""
    path = Path(path)
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        path = path.with_name(path.name + ".yaml")
    if not path.is_file():
        raise HParamsError(f"hparams file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise HParamsError(f"{path}: not UTF-8 text ({exc})") from exc
    try:
        if path.suffix.lower() == ".json":
            config = json.loads(text, object_pairs_hook=unique_json_pairs)
        else:
            config = yaml.load(text, Loader=UniqueKeySafeLoader)  # a SafeLoader: no python tags
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise HParamsError(f"{path}: cannot parse: {exc}") from exc
    if not isinstance(config, dict):
        raise HParamsError(f"{path}: expected a mapping of hyperparameters, got {type(config).__name__}")
    return _convert_scientific_strings(config)


def _check_type(value: Any, annotation: Any) -> bool:
    """Loose runtime type check for the annotations used in the hparams dataclasses."""
    origin = get_origin(annotation)
    if annotation is Any:
        return True
    if origin is Union:
        return any(_check_type(value, arg) for arg in get_args(annotation))
    if origin is Literal:
        return value in get_args(annotation)
    if origin in (dict, Dict):
        return isinstance(value, dict)
    if origin in (list, List):
        (item_type,) = get_args(annotation) or (Any,)
        return isinstance(value, (list, tuple)) and all(_check_type(v, item_type) for v in value)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):  # str, bool, NoneType, ...
        return isinstance(value, annotation)
    return True


@dataclass
class BaseHyperParams:
    """EasyEdit's host fields, shared by every method of this package (help: :data:`SHARED_KEY_HELP`)."""

    ALG_NAME: ClassVar[str] = ""
    # keys that must be in every file although the dataclass has a default for them (README table)
    REQUIRED_KEYS: ClassVar[tuple] = ()

    alg_name: str
    model_name: str
    device: Union[int, str] = 0
    model_parallel: bool = False
    fp16: bool = False
    max_length: int = 40
    batch_size: int = 1

    @classmethod
    def from_dict(cls, config: Dict[str, Any], source: str = "<dict>"):
        """Build from a mapping, rejecting unknown/missing keys and wrong types."""
        config = _convert_scientific_strings(dict(config))
        if config.get("alg_name") != cls.ALG_NAME:
            raise HParamsError(
                f"{source}: key 'alg_name' must be {cls.ALG_NAME!r} for {cls.__name__}, "
                f"got {config.get('alg_name')!r}"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        retired = retired_key_errors(config, fields)
        if retired:
            raise HParamsError(f"{source}: " + "; ".join(retired))
        unknown = sorted(set(config) - set(fields))
        if unknown:
            raise HParamsError(f"{source}: unknown key(s) {unknown} for {cls.__name__}")
        cls._check_values(config, source)
        hints = get_type_hints(cls)
        for name, value in config.items():
            if hints[name] is float and isinstance(value, int):
                config[name] = float(value)
        required = {key for klass in cls.__mro__ for key in getattr(klass, "REQUIRED_KEYS", ())}
        none = dataclasses.MISSING
        required |= {name for name, f in fields.items() if f.default is none and f.default_factory is none}
        missing = [name for name in fields if name not in config and name in required]
        if missing:
            raise HParamsError(f"{source}: missing required key(s) {missing} for {cls.__name__}")
        obj = cls(**config)
        obj.validate(source)
        return obj

    @classmethod
    def _check_values(cls, config: Dict[str, Any], source: str) -> None:
        """Each value of ``config`` has its field's type and, if a number, is finite."""
        hints = get_type_hints(cls)
        for name, value in config.items():
            if not _check_type(value, hints[name]):
                raise HParamsError(f"{source}: key {name!r} has value {value!r}, expected {hints[name]}")
            if isinstance(value, float) and not math.isfinite(value):
                raise HParamsError(f"{source}: key {name!r} must be a finite number, got {value!r}")

    def check(self, source: str = "hparams at edit time") -> None:
        """The loader's checks on the current field values (fields may be changed after loading);
        ``model_name`` may also hold EasyEdit's in-memory ``(model, tokenizer)`` pair."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        name = values.get("model_name")
        if isinstance(name, (tuple, list)) and len(name) == 2 and not isinstance(name[0], str):
            values["model_name"] = "<in-memory model>"
        type(self)._check_values(values, source)
        self.validate(source)

    @classmethod
    def from_hparams(cls, hparams_name_or_path: Union[str, Path]):
        """Load from a YAML or JSON file (EasyEdit's constructor name); a relative ``retain_file`` is resolved
        against the file's folder."""
        config = load_config_file(hparams_name_or_path)
        retain_file = config.get("retain_file")
        if isinstance(retain_file, str) and retain_file and not Path(retain_file).is_absolute():
            config["retain_file"] = str(Path(hparams_name_or_path).parent / retain_file)
        return cls.from_dict(config, source=str(hparams_name_or_path))

    def validate(self, source: str = "<hparams>") -> None:
        """Check value ranges; subclasses extend this."""
        if self.batch_size < 1:
            raise HParamsError(f"{source}: key 'batch_size' must be >= 1, got {self.batch_size}")
        if isinstance(self.model_name, str) and not self.model_name.strip():
            raise HParamsError(f"{source}: key 'model_name' must name a model folder or hub model, got {self.model_name!r}")
        if self.max_length < 1:
            raise HParamsError(f"{source}: key 'max_length' must be >= 1, got {self.max_length}")
        _check_device(self.device, source)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes):
        """A copy with some fields changed (validated like a loaded file)."""
        return type(self).from_dict(dict(self.to_dict(), **changes), source=f"{type(self).__name__}.replace")


def _check_device(device: Union[int, str], source: str) -> None:
    """``device`` names a device torch knows and, for CUDA, one this machine has (an integer CUDA index is
    only checked where there are GPUs: a shipped ``device: 0`` YAML loads on a CPU-only machine)."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if isinstance(device, int):
        if device < 0 or (count and device >= count):
            raise HParamsError(
                f"{source}: key 'device' is CUDA index {device}, but this machine has {count} GPU(s)")
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise HParamsError(f"{source}: key 'device' has value {device!r}, not a device name (e.g. 'cpu', 'cuda:0')") from exc
    if parsed.type == "cuda" and (parsed.index or 0) >= count:
        raise HParamsError(f"{source}: key 'device' is {device!r}, but this machine has {count} CUDA "
                           "device(s)" + ("" if count else " (CUDA is not available: use 'cpu')"))


@dataclass
class EditHyperParams(BaseHyperParams):
    """Fields shared by ZeroUnlearn and ZeroUnlearn-GD (keys, targets, statistics)."""

    REQUIRED_KEYS: ClassVar[tuple] = (
        "layers", "rewrite_module_tmp", "layer_module_tmp", "mlp_module_tmp", "ln_f_module", "lm_head_module",
        "stats_dir", "mom2_dataset",
    )

    # Where to edit
    layers: List[int] = field(default_factory=list)
    rewrite_module_tmp: str = "model.layers.{}.mlp.down_proj"
    layer_module_tmp: str = "model.layers.{}"
    mlp_module_tmp: str = "model.layers.{}.mlp"
    ln_f_module: str = "model.norm"
    lm_head_module: str = "lm_head"
    fact_token: Literal["subject_last", "last"] = "subject_last"

    # Keys: averaged over the bare prompt and N random-prefix contexts
    context_template_count: int = 5
    context_template_length: int = 10

    # Neutral target optimisation (MEMIT-style residual at the last edited layer)
    neutral_target: Optional[str] = None
    v_num_grad_steps: int = 25
    v_lr: float = 0.5
    v_loss_layer: int = -1
    v_weight_decay: float = 1e-3
    clamp_norm_factor: float = 4.0
    kl_factor: float = 0.0625
    v_early_stop_loss: float = 0.05
    chunk_size: int = 64
    targets_optimizer: Literal["adam", "adam_kv"] = "adam_kv"
    target_objective: Literal["neutral", "suppress_answer"] = "neutral"

    # Statistics of general text
    stats_dir: str = "./data/stats"
    mom2_dataset: str = "wikipedia"
    mom2_n_samples: int = 10000
    mom2_dtype: str = "float32"
    mom2_max_length: int = 256

    # Fluency guard (zerounlearn_editor.engine.fluency_guard)
    fluency_max_increase: Optional[float] = 1.0

    # Retain set (opt-in; zerounlearn_editor.engine.retain)
    retain_file: Optional[str] = None

    # Experiments (opt-in): a mapping whose keys must be declared in EXPERIMENTAL_KEYS (key -> help)
    EXPERIMENTAL_KEYS: ClassVar[Dict[str, str]] = {
        "fewshot_contexts": "deep forgetting: this many extra context prefixes of 3 hand-written facts each "
        "(`engine.contexts.fewshot_prefixes`), so keys and targets also see in-context prompts",
    }
    experimental: Dict[str, Any] = field(default_factory=dict)

    def retain_weights(self) -> Dict[str, float]:
        """The method's weights that act through a retain set; all 0 means the paper's method (retain set unused)."""
        return {}

    def needs_context_moment(self) -> bool:
        """Whether the solve needs the mean ``k k^T`` of the prompts' context tokens (read with the keys)."""
        return False

    def tracks_forgotten(self) -> bool:
        """Whether the solve protects the forget keys of earlier edits (lifelong unlearning), so each edit keeps
        the state of what was forgotten on the model (:mod:`zerounlearn_editor.engine.forgotten_state`)."""
        return False

    @classmethod
    def key_help(cls) -> Dict[str, str]:
        """Help text of every key: :data:`SHARED_KEY_HELP` plus each subclass's ``KEY_HELP``."""
        merged = dict(SHARED_KEY_HELP)
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("KEY_HELP", {}))
        return merged

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        for key, value in self.retain_weights().items():
            if not value >= 0 or value == float("inf"):
                raise HParamsError(f"{source}: key {key!r} must be finite and >= 0, got {value!r}")
        unknown = sorted(set(self.experimental) - set(self.EXPERIMENTAL_KEYS))
        if unknown:
            declared = sorted(self.EXPERIMENTAL_KEYS) or "none"
            raise HParamsError(f"{source}: unknown key(s) {unknown} under 'experimental' (declared: {declared})")
        fewshot = self.experimental.get("fewshot_contexts", 0)
        if isinstance(fewshot, bool) or not isinstance(fewshot, int) or fewshot < 0:
            raise HParamsError(
                f"{source}: key 'experimental.fewshot_contexts' must be an integer >= 0, got {fewshot!r}")
        if not self.layers:
            raise HParamsError(f"{source}: key 'layers' must list at least one layer")
        if sorted(set(self.layers)) != list(self.layers):
            raise HParamsError(f"{source}: key 'layers' must be strictly increasing, got {self.layers}")
        for key in ("rewrite_module_tmp", "layer_module_tmp", "mlp_module_tmp"):
            if "{}" not in getattr(self, key):
                raise HParamsError(f"{source}: key {key!r} must contain '{{}}' for the layer index")
        at_least_zero = ("context_template_count", "kl_factor", "v_weight_decay", "v_early_stop_loss",
                         "v_num_grad_steps")
        at_least_one = ("context_template_length", "mom2_n_samples", "chunk_size", "mom2_max_length")
        for keys, ok, bound in ((at_least_zero, lambda v: v >= 0, ">= 0"),
                                (at_least_one, lambda v: v >= 1, ">= 1"),
                                (("clamp_norm_factor", "v_lr"), lambda v: v > 0, "> 0")):
            for key in keys:
                if not ok(getattr(self, key)):
                    raise HParamsError(f"{source}: key {key!r} must be {bound}, got {getattr(self, key)!r}")
        if self.v_loss_layer < -1:
            raise HParamsError(
                f"{source}: key 'v_loss_layer' must be -1 (the model's last layer) or a layer index, got {self.v_loss_layer}"
            )
        for key in ("stats_dir", "mom2_dataset"):
            if not getattr(self, key).strip():
                raise HParamsError(f"{source}: key {key!r} is empty")
        if self.mom2_dtype not in ("float16", "float32", "float64"):
            hint = " (numpy, and so the .npz cache EasyEdit shares, has no bfloat16)" if self.mom2_dtype == "bfloat16" else ""
            raise HParamsError(
                f"{source}: key 'mom2_dtype' must be float16, float32 or float64, got {self.mom2_dtype!r}{hint}"
            )
        if self.fluency_max_increase is not None and not 0 < self.fluency_max_increase < float("inf"):
            raise HParamsError(f"{source}: key 'fluency_max_increase' must be finite and > 0 (or null: no guard), "
                               f"got {self.fluency_max_increase!r}")
        if 0 <= self.v_loss_layer <= self.layers[-1]:
            # the residual is added to the last edited layer's output; a loss read there or before
            # cannot see it through attention (zero gradient, the targets never move)
            raise HParamsError(
                f"{source}: key 'v_loss_layer' ({self.v_loss_layer}) must be after the last edited layer "
                f"({self.layers[-1]}), or -1 for the model's last layer"
            )


SHARED_KEY_HELP: Dict[str, str] = {
    # EasyEdit's host fields
    "alg_name": "`ZeroUnlearn` or `ZeroUnlearn-GD` (must match the class)",
    "model_name": "hub name or local folder of the model; `smollm2` is the prepared SmolLM2",
    "device": "CUDA index or a device name (`cpu`, `cuda:0`) the edit runs on",
    "model_parallel": "EasyEdit host field: load with `device_map=\"auto\"`",
    "fp16": "EasyEdit host field: load the model in float16",
    "max_length": "EasyEdit host field: maximum prompt length in tokens for evaluation",
    "batch_size": "EasyEdit host field: requests per `batch_edit` (`edit()` needs 1)",
    # where to edit
    "layers": "edited layers, strictly increasing; processed in order, keys recomputed after each",
    "rewrite_module_tmp": "the edited weight, e.g. `model.layers.{}.mlp.down_proj` (GPT-2 `Conv1D` is handled)",
    "layer_module_tmp": "the transformer block of a layer (`{}` = layer index)",
    "mlp_module_tmp": "the MLP of a layer (`{}` = layer index)",
    "ln_f_module": "final norm (used by the target optimisation)",
    "lm_head_module": "output head (used by the target optimisation)",
    "fact_token": "`subject_last` (key at the subject's last token) or `last` (the prompt's last token)",
    # keys
    "context_template_count": "keys are averaged over the bare prompt and this many sampled prefixes",
    "context_template_length": "tokens per sampled prefix",
    # neutral targets
    "neutral_target": "text the model should say instead; `null` = the tokenizer's EOS",
    "v_num_grad_steps": "Adam steps of the neutral-state residual (one per request, added at the last edited layer; loss: "
    "NLL of the neutral target + KL on `\"{subject} is a\"` + weight decay)",
    "v_lr": "Adam learning rate of the residual",
    "v_loss_layer": "layer whose output feeds the target loss; -1 or the model's last layer = its own head",
    "v_weight_decay": "weight decay of the residual, relative to the hidden state's squared norm",
    "clamp_norm_factor": "the residual's norm is clamped to this times the hidden state's",
    "kl_factor": "weight of the KL term on `\"{subject} is a\"`",
    "v_early_stop_loss": "a request stops when its target loss falls below this",
    "chunk_size": "requests per batched key/target pass (memory bound; results do not depend on it)",
    "targets_optimizer": "`adam_kv` (default): the paper's Adam loop (same updates, clamp and early stop) on cached prefix "
    "keys/values, equal to `adam` up to float rounding and 2.4-2.75x faster on SmolLM2 at n = 50 (benchmarks/RESULTS.md, "
    "\"Speed\"); `adam`: the same loop on full forwards (the reference; set it to reproduce earlier runs bit for bit)",
    "target_objective": "`neutral` (the paper): maximise the neutral target's likelihood; `suppress_answer` (opt-in, every "
    "request needs `ground_truth`): minimise `-log(1 - p)`, p the whole answer's probability, stopping at "
    "`v_early_stop_loss` (0.01: p < 0.01), so the residual only removes the answer instead of making EOS likely",
    # statistics
    "stats_dir": "folder of the cached utility statistics `C0`",
    "mom2_dataset": "corpus of `C0`: built-in `wiki_passages_3643`, a `.jsonl`/`.txt` file, a saved dataset or `hub:NAME`",
    "mom2_n_samples": "passages of the corpus used for `C0`",
    "mom2_dtype": "dtype of `C0` (`float16`, `float32`, `float64`)",
    "mom2_max_length": "tokens per passage",
    "fluency_max_increase": "fluency guard on every edit: the allowed relative perplexity increase on 256 tokens of the "
                            "built-in WikiText-2 text (1.0 = +100%); beyond it the edit is refused and the weights "
                            "restored (the apply functions' `fluency_guard=\"warn\"`, `unlearn --allow-fluency-loss`, "
                            "keep it with a warning); `null` = no guard. It only reads (see \"Fluency guard\")",
    # retain set and experiments
    "retain_file": "retain set (ZeroUnlearn-GD+R): facts to keep, a JSON/JSONL/YAML list of `{prompt, subject}`, path "
    "relative to the YAML; `null` = none (or `retain=` of the apply functions)",
    "experimental": "opt-in experiments, a mapping of keys declared by the class (`fewshot_contexts`); an "
    "experiment that does not win on report data leaves again",
}
"""One line of help per key every method shares; each method's config adds its own (``KEY_HELP``)."""
