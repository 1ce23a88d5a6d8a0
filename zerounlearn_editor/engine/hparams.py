"""Hyperparameter dataclasses and their strict YAML/JSON loader.

A method config is a dataclass whose fields are exactly its YAML's keys. A missing required key, an unknown
or repeated key, a wrong type, a non-finite number or a value out of range raises :class:`HParamsError`
naming the file, the key and the value; a retired key fails with its message
(:mod:`zerounlearn_editor.engine.retired_keys`). Every key has help text on its field
(``field(metadata={"help": ...})``; the README key table is generated from it by
:mod:`zerounlearn_editor.cli.hparams_doc`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Literal, Optional, Union, get_args, get_origin, get_type_hints

from zerounlearn_editor.engine.retired_keys import (  # noqa: F401 (RETIRED_KEYS: old import path)
    GRADUATED_EXPERIMENTAL_KEYS,
    RETIRED_EXPERIMENTAL_KEYS,
    RETIRED_KEYS,
    retired_key_errors,
)
from zerounlearn_editor.support.structured_files import read_structured

_SCI_NOTATION = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


class HParamsError(ValueError):
    """A hyperparameter file or value is invalid (message names the file and key)."""


RANK_KEY = "rank_below_alternatives"
"""The key of the answer-ranking target term (``engine.targets.ranking``; graduated from ``experimental:``)."""
RANK_FIELDS = ("weight", "margin", "k")
"""The fields of ``rank_below_alternatives``."""


def is_real_number(value: object) -> bool:
    """An ``int`` or ``float`` that is not a ``bool`` (YAML's numbers; ``True`` is an ``int`` to Python)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_rank_setting(value: Any, source: str) -> None:
    """:class:`HParamsError` unless ``value`` is ``{weight: finite > 0, margin: finite >= 0, k: integer >= 1}``."""
    key = RANK_KEY
    if not isinstance(value, dict) or sorted(value) != sorted(RANK_FIELDS):
        raise HParamsError(f"{source}: key '{key}' must be a mapping with exactly the fields {list(RANK_FIELDS)}, "
                           f"got {value!r}")
    weight, margin, k = value["weight"], value["margin"], value["k"]
    if not is_real_number(weight) or not 0 < weight < float("inf"):
        raise HParamsError(f"{source}: field '{key}.weight' must be a finite number > 0, got {weight!r}")
    if not is_real_number(margin) or not 0 <= margin < float("inf"):
        raise HParamsError(f"{source}: field '{key}.margin' must be a finite number >= 0 (nats), got {margin!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise HParamsError(f"{source}: field '{key}.k' must be an integer >= 1, got {k!r}")


STEP_RANK_KEY = "suppress_rank_limit"
"""The key that lets only requests whose answer ranks at most ``R`` take target steps (``engine.adam.held_back``;
graduated from ``experimental:``)."""


def check_step_rank_setting(value: Any, objective: str, source: str) -> None:
    """:class:`HParamsError` unless ``suppress_rank_limit`` is an integer >= 0 set with ``target_objective:
    suppress_answer`` (a rank of the answer to suppress)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HParamsError(f"{source}: key '{STEP_RANK_KEY}' must be an integer >= 0 (0: the model's "
                           f"argmax), got {value!r}")
    if objective != "suppress_answer":
        raise HParamsError(f"{source}: key '{STEP_RANK_KEY}' ranks the answer that "
                           f"'target_objective: suppress_answer' pushes down; this file's target_objective is "
                           f"{objective!r}")


QUANTIZED_KEYS = "quantized_forget_keys"
"""The key of the forget keys read on a quantized copy (``engine.quantized_keys``; graduated from
``experimental:``); a key of ZeroUnlearn-GD only (ZeroUnlearn's projector would erase the twin values' span whatever
the weight)."""
QUANTIZED_KEYS_FIELDS = ("scheme", "weight")
"""The fields of ``quantized_forget_keys``."""


def check_quantized_keys_setting(value: Any, source: str) -> None:
    """:class:`HParamsError` unless ``value`` is ``{scheme: an audit RTN scheme name, weight: finite > 0}``."""
    from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES

    key = QUANTIZED_KEYS
    if not isinstance(value, dict) or sorted(value) != sorted(QUANTIZED_KEYS_FIELDS):
        raise HParamsError(f"{source}: key '{key}' must be a mapping with exactly the fields "
                           f"{list(QUANTIZED_KEYS_FIELDS)}, got {value!r}")
    scheme, weight = value["scheme"], value["weight"]
    if not isinstance(scheme, str) or scheme not in QUANT_SCHEMES:
        raise HParamsError(f"{source}: field '{key}.scheme' must be one of {sorted(QUANT_SCHEMES)}, got {scheme!r}")
    if not is_real_number(weight) or not 0 < weight < float("inf"):
        raise HParamsError(f"{source}: field '{key}.weight' must be a finite number > 0, got {weight!r}")


def _convert_scientific_strings(config: Dict[str, Any], depth: int = 2) -> Dict[str, Any]:
    """YAML 1.1 reads ``1e-3`` as a string; turn such strings into floats: the top-level values and, ``depth`` levels
    of mappings down, the values of mapping values (``quantized_forget_keys: {scheme: int4, weight: 5e-1}``,
    ``nullspace_text_weight: {key_reach: 6e-1}``, the fields of an ``experimental:`` mapping); lists are left as they
    are."""
    return {key: _convert_scientific_strings(value, depth - 1) if isinstance(value, dict) and depth > 0
            else float(value) if isinstance(value, str) and _SCI_NOTATION.match(value.strip()) else value
            for key, value in config.items()}


@dataclass(frozen=True)
class ConfigFile:
    """An hparams file read once (:func:`read_config_file`): ``name`` as the caller gave it, ``path`` the file read
    (``.yaml`` appended without a suffix), its mapping and the sha256 of its bytes."""

    name: str
    path: Path
    config: Dict[str, Any]
    sha256: str


def read_config_file(path: Union[str, Path]) -> ConfigFile:
    """Read a YAML or JSON mapping from ``path`` once (``.yaml`` appended without a suffix, as EasyEdit does);
    a key given twice is an error."""
    name, path = str(path), Path(path)
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        path = path.with_name(path.name + ".yaml")
    if not path.is_file():
        raise HParamsError(f"hparams file not found: {path}")
    data = path.read_bytes()
    config = read_structured(path, "hparams", lambda message: HParamsError(f"{path}: {message}"),
                             suffix=".json" if path.suffix.lower() == ".json" else ".yaml", data=data)
    if not isinstance(config, dict):
        raise HParamsError(f"{path}: expected a mapping of hyperparameters, got {type(config).__name__}")
    return ConfigFile(name, path, _convert_scientific_strings(config), hashlib.sha256(data).hexdigest())


def load_config_file(path: Union[str, Path]) -> Dict[str, Any]:
    """The mapping of :func:`read_config_file`."""
    return read_config_file(path).config


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
        return is_real_number(value)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):  # str, bool, NoneType, ...
        return isinstance(value, annotation)
    return True


@dataclass
class BaseHyperParams:
    """EasyEdit's host fields, shared by every method of this package."""

    ALG_NAME: ClassVar[str] = ""
    # keys that must be in every file although the dataclass has a default for them (README table)
    REQUIRED_KEYS: ClassVar[tuple] = ()

    # the registered names are the methods layer's: hparams_doc appends them to this help
    alg_name: str = field(metadata={"help": "the registered method the file is for (must match the class)"})
    model_name: str = field(
        metadata={"help": "hub name or local folder of the model; `smollm2` is the prepared SmolLM2"}
    )
    device: Union[int, str] = field(default=0, metadata={"help": (
        "CUDA index or a device name (`cpu`, `cuda:0`) the edit runs on"
    )})
    model_parallel: bool = field(default=False, metadata={"help": (
        "EasyEdit host field: load with `device_map=\"auto\"`"
    )})
    fp16: bool = field(default=False, metadata={"help": "EasyEdit host field: load the model in float16"})
    max_length: int = field(default=40, metadata={"help": (
        "EasyEdit host field: maximum prompt length in tokens for evaluation"
    )})
    batch_size: int = field(default=1, metadata={"help": (
        "EasyEdit host field: requests per `batch_edit` (`edit()` needs 1)"
    )})

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
        return cls.from_config_file(read_config_file(hparams_name_or_path))

    @classmethod
    def from_config_file(cls, source: ConfigFile):
        """Build from an hparams file already read (:func:`read_config_file`), as :meth:`from_hparams` does."""
        config = dict(source.config)
        retain_file = config.get("retain_file")
        if isinstance(retain_file, str) and retain_file and not Path(retain_file).is_absolute():
            config["retain_file"] = str(Path(source.name).parent / retain_file)
        return cls.from_dict(config, source=source.name)

    def validate(self, source: str = "<hparams>") -> None:
        """Check value ranges; subclasses extend this."""
        if self.batch_size < 1:
            raise HParamsError(f"{source}: key 'batch_size' must be >= 1, got {self.batch_size}")
        if isinstance(self.model_name, str) and not self.model_name.strip():
            raise HParamsError(
                f"{source}: key 'model_name' must name a model folder or hub model, got {self.model_name!r}"
            )
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
        raise HParamsError(
            f"{source}: key 'device' has value {device!r}, not a device name (e.g. 'cpu', 'cuda:0')"
        ) from exc
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
    layers: List[int] = field(default_factory=list, metadata={"help": (
        "edited layers, strictly increasing; processed in order, keys recomputed after each"
    )})
    rewrite_module_tmp: str = field(default="model.layers.{}.mlp.down_proj", metadata={"help": (
        "the edited weight, e.g. `model.layers.{}.mlp.down_proj` (GPT-2 `Conv1D` is handled)"
    )})
    layer_module_tmp: str = field(default="model.layers.{}", metadata={"help": (
        "the transformer block of a layer (`{}` = layer index)"
    )})
    mlp_module_tmp: str = field(default="model.layers.{}.mlp", metadata={"help": (
        "the MLP of a layer (`{}` = layer index)"
    )})
    ln_f_module: str = field(default="model.norm", metadata={"help": "final norm (used by the target optimisation)"})
    lm_head_module: str = field(default="lm_head", metadata={"help": "output head (used by the target optimisation)"})
    fact_token: Literal["subject_last", "last"] = field(default="subject_last", metadata={"help": (
        "`subject_last` (key at the subject's last token) or `last` (the prompt's last token)"
    )})

    # Keys: averaged over the bare prompt and N random-prefix contexts
    context_template_count: int = field(default=5, metadata={"help": (
        "keys are averaged over the bare prompt and this many sampled prefixes"
    )})
    context_template_length: int = field(default=10, metadata={"help": "tokens per sampled prefix"})

    # Neutral target optimisation (MEMIT-style residual at the last edited layer)
    neutral_target: Optional[str] = field(default=None, metadata={"help": (
        "text the model should say instead; `null` = the tokenizer's EOS"
    )})
    v_num_grad_steps: int = field(default=25, metadata={"help": (
        "Adam steps of the neutral-state residual (one per request, added at the last edited layer; loss: NLL of the "
        "neutral target + KL on `\"{subject} is a\"` + weight decay)"
    )})
    v_lr: float = field(default=0.5, metadata={"help": "Adam learning rate of the residual"})
    v_loss_layer: int = field(default=-1, metadata={"help": (
        "layer whose output feeds the target loss; -1 or the model's last layer = its own head"
    )})
    v_weight_decay: float = field(default=1e-3, metadata={"help": (
        "weight decay of the residual, relative to the hidden state's squared norm"
    )})
    clamp_norm_factor: float = field(default=4.0, metadata={"help": (
        "the residual's norm is clamped to this times the hidden state's"
    )})
    kl_factor: float = field(default=0.0625, metadata={"help": "weight of the KL term on `\"{subject} is a\"`"})
    v_early_stop_loss: float = field(default=0.05, metadata={"help": (
        "a request stops when its target loss falls below this; a final loss far above it (above "
        "max(10 x this, ln 10 = 2.30)) is warned about, naming the requests (`EditReport.unreached_targets`)"
    )})
    chunk_size: int = field(default=64, metadata={"help": (
        "requests per batched key/target pass (memory bound; results do not depend on it)"
    )})
    targets_optimizer: Literal["adam", "adam_kv"] = field(default="adam_kv", metadata={"help": (
        "`adam_kv` (default): the paper's Adam loop (same updates, clamp and early stop) on cached prefix "
        "keys/values, equal to `adam` up to float rounding and faster "
        "(benchmarks/RESULTS.md, \"Speed\"); `adam`: the same loop on full forwards (the reference; set it to "
        "reproduce earlier runs bit for bit)"
    )})
    target_objective: Literal["neutral", "suppress_answer"] = field(default="neutral", metadata={"help": (
        "`neutral` (the paper): maximise the neutral target's likelihood; `suppress_answer` (opt-in, every request "
        "needs `ground_truth`): minimise `-log(1 - p)`, p the whole answer's probability, stopping at "
        "`v_early_stop_loss` (0.01: p < 0.01), so the residual only removes the answer instead of making EOS likely"
    )})

    rank_below_alternatives: Any = field(default=None, metadata={"help": (
        "opt-in, `null` = the paper; `{weight, margin, k}` (the `-robust.yaml` files: 1, 8, 3): adds `weight * "
        "relu(z_answer - mean z_alt + margin)` at the answer position of every target row to the target objective, "
        "`z_alt` the logits of the `k` other requests' answer first tokens the unedited model finds most likely "
        "(`engine.targets.ranking`; a request whose answer no other request's differs from gets no term)"
    )})
    fewshot_contexts: int = field(default=0, metadata={"help": (
        "opt-in, 0 = the paper (the `-deep.yaml` files: 4): this many extra context prefixes of 3 built-in "
        "hand-written facts each (`engine.contexts.fewshot_prefixes`), so keys and targets also see in-context "
        "prompts; a forget set that names too many of those facts is refused"
    )})

    # Statistics of general text
    stats_dir: str = field(default="./data/stats", metadata={"help": (
        "folder of the cached utility statistics `C0` (and, in `nullspace_eigh/`, ZeroUnlearn-GD's cached "
        "eigendecompositions of them, keyed by content)")})
    mom2_dataset: str = field(default="wikipedia", metadata={"help": (
        "corpus of `C0`: built-in `wiki_passages_3643`, a `.jsonl`/`.txt` file, a saved dataset or `hub:NAME`"
    )})
    mom2_n_samples: int = field(default=10000, metadata={"help": "passages of the corpus used for `C0`"})
    mom2_dtype: str = field(default="float32", metadata={"help": "dtype of `C0` (`float16`, `float32`, `float64`)"})
    mom2_max_length: int = field(default=256, metadata={"help": "tokens per passage"})

    # Fluency guard (zerounlearn_editor.engine.fluency_guard)
    fluency_max_increase: Optional[float] = field(default=1.0, metadata={"help": (
        "fluency guard on every edit: the allowed relative perplexity increase on 8 passages of 128 tokens of "
        "the built-in WikiText-2 text (1.0 = +100%); beyond it the edit is refused and the weights restored (the "
        "apply functions' `fluency_guard=\"warn\"`, `unlearn --allow-fluency-loss`, keep it with a warning); `null` "
        "= no guard. It only reads (see \"Fluency guard\")"
    )})

    # opt-in (null = every request steps, the paper's loop); see engine.adam.held_back
    suppress_rank_limit: Optional[int] = field(default=None, metadata={"help": (
        "opt-in, with `target_objective: suppress_answer`; `null` = every request takes target steps (the paper's "
        "loop). `R` (an integer >= 0): only requests whose answer's first token ranks at most `R` after the bare "
        "prompt on the unedited model (0: it is the model's argmax) take target steps; the others keep the residual "
        "0, so the solve holds their values where they are. `<model>-many.yaml` sets 0 (not `-retain-many` / "
        "`-robust`; `init-hparams --many` writes it; benchmarks/RESULTS.md, 12.18-12.19)"
    )})

    # Retain set (opt-in; zerounlearn_editor.engine.retain)
    retain_file: Optional[str] = field(default=None, metadata={"help": (
        "retain set (ZeroUnlearn-GD+R): facts to keep, a JSON/JSONL/YAML list of `{prompt, subject}`, path relative "
        "to the YAML; `null` = none (or `retain=` of the apply functions)"
    )})

    # Experiments (opt-in): a mapping whose keys must be declared in EXPERIMENTAL_KEYS (key -> help)
    EXPERIMENTAL_KEYS: ClassVar[Dict[str, str]] = {}
    experimental: Dict[str, Any] = field(default_factory=dict, metadata={"help": (
        "opt-in experiments, a mapping of keys declared by the class (none is declared now: each one measured either "
        "won and became a key of its own or left); an experiment that does not win on report data leaves again"
    )})

    def retain_weights(self) -> Dict[str, float]:
        """The method's weights that act through a retain set; all 0 means the paper's method (retain set unused)."""
        return {}

    def needs_context_moment(self) -> bool:
        """Whether the solve needs the mean ``k k^T`` of the prompts' context tokens (read with the keys)."""
        return False

    @classmethod
    def key_help(cls) -> Dict[str, str]:
        """Help text of every key that has one: its field's ``metadata["help"]`` (read by ``hparams_doc``)."""
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls) if "help" in f.metadata}

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        for key, value in self.retain_weights().items():
            if not value >= 0 or value == float("inf"):
                raise HParamsError(f"{source}: key {key!r} must be finite and >= 0, got {value!r}")
        unknown = sorted(set(self.experimental) - set(self.EXPERIMENTAL_KEYS))
        retired = [f"'experimental.{key}' was retired: {RETIRED_EXPERIMENTAL_KEYS[key]}" for key in unknown
                   if key in RETIRED_EXPERIMENTAL_KEYS]
        retired += [f"'experimental.{key}' {GRADUATED_EXPERIMENTAL_KEYS[key]}" for key in unknown
                    if key in GRADUATED_EXPERIMENTAL_KEYS]
        if retired:
            raise HParamsError(f"{source}: " + "; ".join(retired))
        if unknown:
            declared = sorted(self.EXPERIMENTAL_KEYS) or "none"
            raise HParamsError(f"{source}: unknown key(s) {unknown} under 'experimental' (declared: {declared})")
        if self.suppress_rank_limit is not None:
            check_step_rank_setting(self.suppress_rank_limit, self.target_objective, source)
        if self.fewshot_contexts < 0:
            raise HParamsError(
                f"{source}: key 'fewshot_contexts' must be an integer >= 0, got {self.fewshot_contexts!r}")
        if self.rank_below_alternatives is not None:
            _check_rank_setting(self.rank_below_alternatives, source)
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
                f"{source}: key 'v_loss_layer' must be -1 (the model's last layer) or a layer index, got "
                f"{self.v_loss_layer}"
            )
        for key in ("stats_dir", "mom2_dataset"):
            if not getattr(self, key).strip():
                raise HParamsError(f"{source}: key {key!r} is empty")
        if self.mom2_dtype not in ("float16", "float32", "float64"):
            hint = (
                " (numpy, and so the .npz cache EasyEdit shares, has no bfloat16)"
                if self.mom2_dtype == "bfloat16"
                else ""
            )
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
