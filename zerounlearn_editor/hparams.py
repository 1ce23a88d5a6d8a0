"""Hyperparameter dataclasses and their strict YAML/JSON loader.

Every method config is a dataclass whose fields are exactly the keys its YAML may hold.
Loading is strict: a missing required key (no default, or listed in ``REQUIRED_KEYS``), an
unknown key, a key given twice in one file, a wrong type, a non-finite number or a value out of
range raises :class:`HParamsError` naming the file, the key and the value, so a typo never
silently falls back to a default. The keys with defaults are documented in the README.
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

__all__ = [
    "HParamsError",
    "BaseHyperParams",
    "ZeroUnlearnHyperParams",
    "ZeroUnlearnGDHyperParams",
    "load_config_file",
]

_SCI_NOTATION = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


class HParamsError(ValueError):
    """A hyperparameter file or value is invalid (message names the file and key)."""


def _convert_scientific_strings(config: Dict[str, Any]) -> Dict[str, Any]:
    """YAML 1.1 reads ``1e-3`` as a string; turn such strings into floats."""
    out = {}
    for key, value in config.items():
        if isinstance(value, str) and _SCI_NOTATION.match(value.strip()):
            value = float(value)
        out[key] = value
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
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


def _json_pairs(pairs):
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise json.JSONDecodeError(f"duplicate key(s) {repeated}", "", 0)
    return dict(pairs)


def load_config_file(path: Union[str, Path]) -> Dict[str, Any]:
    """Read a YAML (``safe_load``) or JSON mapping from ``path``.

    A path without suffix gets ``.yaml`` appended, as EasyEdit does. A key given twice is an
    error (``yaml.safe_load`` would keep the last value silently).
    """
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
            config = json.loads(text, object_pairs_hook=_json_pairs)
        else:
            config = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no python tags
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
    if origin in (list, List):
        (item_type,) = get_args(annotation) or (Any,)
        return isinstance(value, (list, tuple)) and all(_check_type(v, item_type) for v in value)
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


@dataclass
class BaseHyperParams:
    """EasyEdit's host fields, shared by every method of this package.

    Attributes:
        alg_name: the method name; must equal the class's ``ALG_NAME``.
        model_name: hub name or local folder of the model (EasyEdit loads it from here).
        device: CUDA index, ``"cpu"``/``"cuda:0"``-style string; the device edits run on.
        model_parallel: load with ``device_map="auto"`` in EasyEdit.
        fp16: load the model in float16 in EasyEdit.
        max_length: maximum prompt length in tokens for evaluation.
        batch_size: requests edited together in EasyEdit's ``batch_edit``.
    """

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
        unknown = sorted(set(config) - set(fields))
        if unknown:
            raise HParamsError(f"{source}: unknown key(s) {unknown} for {cls.__name__}")
        hints = get_type_hints(cls)
        for name, value in config.items():
            if not _check_type(value, hints[name]):
                raise HParamsError(
                    f"{source}: key {name!r} has value {value!r}, expected {hints[name]}"
                )
            if hints[name] is float and isinstance(value, int):
                config[name] = float(value)
            if isinstance(value, float) and not math.isfinite(value):
                raise HParamsError(f"{source}: key {name!r} must be a finite number, got {value!r}")
        required = {key for klass in cls.__mro__ for key in getattr(klass, "REQUIRED_KEYS", ())}
        missing = [
            name
            for name, f in fields.items()
            if name not in config
            and (
                name in required
                or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)  # type: ignore[misc]
            )
        ]
        if missing:
            raise HParamsError(f"{source}: missing required key(s) {missing} for {cls.__name__}")
        obj = cls(**config)
        obj.validate(source)
        return obj

    @classmethod
    def from_hparams(cls, hparams_name_or_path: Union[str, Path]):
        """Load from a YAML or JSON file (EasyEdit's constructor name).

        A relative ``retain_file`` is resolved against the file's folder.
        """
        config = load_config_file(hparams_name_or_path)
        retain_file = config.get("retain_file")
        if isinstance(retain_file, str) and retain_file and not Path(retain_file).is_absolute():
            config["retain_file"] = str(Path(hparams_name_or_path).parent / retain_file)
        return cls.from_dict(config, source=str(hparams_name_or_path))

    @classmethod
    def from_json(cls, path: Union[str, Path]):
        return cls.from_hparams(path)

    def validate(self, source: str = "<hparams>") -> None:
        """Check value ranges; subclasses extend this."""
        if self.batch_size < 1:
            raise HParamsError(f"{source}: key 'batch_size' must be >= 1, got {self.batch_size}")
        if not self.model_name.strip():
            raise HParamsError(f"{source}: key 'model_name' must name a model folder or hub model, got {self.model_name!r}")
        if self.max_length < 1:
            raise HParamsError(f"{source}: key 'max_length' must be >= 1, got {self.max_length}")
        _check_device(self.device, source)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes):
        """A copy with some fields changed (validated like a loaded file)."""
        config = self.to_dict()
        config.update(changes)
        return type(self).from_dict(config, source=f"{type(self).__name__}.replace")


def _check_device(device: Union[int, str], source: str) -> None:
    """``device`` names a device torch knows and, for CUDA, one this machine has.

    An integer is EasyEdit's CUDA index: checked against the visible GPUs when there are any (a
    shipped ``device: 0`` YAML still loads on a CPU-only machine, where the edit runs on the
    model's own device). A string (``"cpu"``, ``"cuda:1"``, ``"mps"``) must be usable here.
    """
    import torch

    if isinstance(device, int):
        if device < 0 or (torch.cuda.is_available() and device >= torch.cuda.device_count()):
            visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise HParamsError(f"{source}: key 'device' is CUDA index {device}, but this machine has {visible} GPU(s)")
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise HParamsError(f"{source}: key 'device' has value {device!r}, not a device name (e.g. 'cpu', 'cuda:0')") from exc
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = parsed.index or 0
        if index >= count:
            raise HParamsError(
                f"{source}: key 'device' is {device!r}, but this machine has {count} CUDA device(s)"
                + ("" if count else " (CUDA is not available: use 'cpu')")
            )


@dataclass
class _EditHyperParams(BaseHyperParams):
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
    context_seed: int = 0

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
    # "adam_kv" (default): the paper's Adam loop (same updates, clamp and early stop, equal up to float
    # rounding) on cached prefix keys/values, ~2.6x faster; "adam": the paper's loop on full suffix
    # forwards (the reference); "lbfgs": per-request projected L-BFGS with line search (faster, lower NLL,
    # but edits forget less at n = 50: benchmarks/README). See zerounlearn_editor.targets_fast.
    targets_optimizer: Literal["adam", "adam_kv", "lbfgs"] = "adam_kv"
    # What the residual optimises (opt-in; "neutral" = the paper): "neutral" maximises the likelihood
    # of the neutral target (EOS); "suppress_answer" minimises -log(1 - p(answer)), p the probability of the
    # request's whole answer (needs 'ground_truth' in every request and targets_optimizer adam or adam_kv): the
    # answer is removed without asking for EOS, so the residual can be smaller.
    target_objective: Literal["neutral", "suppress_answer"] = "neutral"
    # Retain-aware neutral targets (opt-in, 0 = the paper; needs a retain set and targets_optimizer
    # adam or adam_kv, both run the full Adam loop for them): each request's target loss gains
    # target_retain_weight * the mean KL on its target_retain_neighbours nearest retain prompts when
    # target_retain_scale * its residual is added there (zerounlearn_editor.targets.optimise_neutral_targets)
    target_retain_weight: float = 0.0
    target_retain_neighbours: int = 5
    target_retain_scale: float = 0.5

    # Statistics of general text
    stats_dir: str = "./data/stats"
    mom2_dataset: str = "wikipedia"
    mom2_n_samples: int = 10000
    mom2_dtype: str = "float32"
    mom2_max_length: int = 256
    mom2_batch_size: int = 16

    # Retain set (opt-in): facts to keep, a JSON/JSONL/YAML list of {prompt, subject}; the
    # ``retain=`` argument of the apply functions takes precedence (see zerounlearn_editor.retain)
    retain_file: Optional[str] = None

    # Research levers (opt-in; empty = the paper): a mapping with its own strict schema,
    # zerounlearn_editor.deep_contexts.ExperimentalSettings (an unknown key is an error)
    experimental: Dict[str, Any] = field(default_factory=dict)

    def retain_weights(self) -> Dict[str, float]:
        """The method's retain-aware weights; all 0 means the paper's method (retain set unused)."""
        return {}

    def retain_set_weights(self) -> Dict[str, float]:
        """The weights that act through a retain set: the solve's (:meth:`retain_weights`; a subclass
        leaves out a retain-free one such as ZeroUnlearn's ``projection_utility_weight``) and
        ``target_retain_weight``; all 0: a retain set is unused."""
        return dict(self.retain_weights(), target_retain_weight=self.target_retain_weight)

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        from .deep_contexts import ExperimentalSettings

        try:
            ExperimentalSettings.from_mapping(self.experimental)
        except ValueError as exc:
            raise HParamsError(f"{source}: key 'experimental': {exc}") from None
        for key, value in self.retain_weights().items():
            if not value >= 0 or value == float("inf"):
                raise HParamsError(f"{source}: key {key!r} must be finite and >= 0, got {value!r}")
        if not self.layers:
            raise HParamsError(f"{source}: key 'layers' must list at least one layer")
        if sorted(set(self.layers)) != list(self.layers):
            raise HParamsError(f"{source}: key 'layers' must be strictly increasing, got {self.layers}")
        for key in ("rewrite_module_tmp", "layer_module_tmp", "mlp_module_tmp"):
            if "{}" not in getattr(self, key):
                raise HParamsError(f"{source}: key {key!r} must contain '{{}}' for the layer index")
        if self.context_template_count < 0:
            raise HParamsError(f"{source}: key 'context_template_count' must be >= 0, got {self.context_template_count}")
        if self.context_template_length < 1:
            raise HParamsError(f"{source}: key 'context_template_length' must be >= 1, got {self.context_template_length}")
        for key in ("clamp_norm_factor", "v_lr"):
            if not getattr(self, key) > 0:
                raise HParamsError(f"{source}: key {key!r} must be > 0, got {getattr(self, key)!r}")
        if not 0 <= self.target_retain_weight < float("inf"):
            raise HParamsError(f"{source}: key 'target_retain_weight' must be finite and >= 0, got {self.target_retain_weight!r}")
        if self.target_retain_neighbours < 1:
            raise HParamsError(f"{source}: key 'target_retain_neighbours' must be >= 1, got {self.target_retain_neighbours!r}")
        if not 0 < self.target_retain_scale <= 1:
            raise HParamsError(f"{source}: key 'target_retain_scale' must be in (0, 1], got {self.target_retain_scale!r}")
        if self.target_retain_weight > 0 and self.targets_optimizer not in ("adam", "adam_kv"):
            raise HParamsError(
                f"{source}: key 'target_retain_weight' > 0 needs 'targets_optimizer: adam' or 'adam_kv' (both run "
                f"the Adam loop for them), got {self.targets_optimizer!r}"
            )
        if self.target_objective != "neutral" and self.targets_optimizer not in ("adam", "adam_kv"):
            raise HParamsError(
                f"{source}: key 'target_objective: {self.target_objective}' needs 'targets_optimizer: adam' or "
                f"'adam_kv', got {self.targets_optimizer!r}"
            )
        for key in ("kl_factor", "v_weight_decay", "v_early_stop_loss"):
            if getattr(self, key) < 0:
                raise HParamsError(f"{source}: key {key!r} must be >= 0, got {getattr(self, key)!r}")
        if self.v_loss_layer < -1:
            raise HParamsError(
                f"{source}: key 'v_loss_layer' must be -1 (the model's last layer) or a layer index, got {self.v_loss_layer}"
            )
        if not self.stats_dir.strip():
            raise HParamsError(f"{source}: key 'stats_dir' is empty")
        if not self.mom2_dataset.strip():
            raise HParamsError(f"{source}: key 'mom2_dataset' is empty")
        if self.mom2_dtype not in ("float16", "float32", "float64"):
            hint = " (numpy, and so the .npz cache EasyEdit shares, has no bfloat16)" if self.mom2_dtype == "bfloat16" else ""
            raise HParamsError(
                f"{source}: key 'mom2_dtype' must be float16, float32 or float64, got {self.mom2_dtype!r}{hint}"
            )
        for key in ("mom2_n_samples", "chunk_size", "mom2_max_length", "mom2_batch_size"):
            if getattr(self, key) < 1:
                raise HParamsError(f"{source}: key {key!r} must be >= 1")
        if self.v_num_grad_steps < 0:
            raise HParamsError(f"{source}: key 'v_num_grad_steps' must be >= 0")
        if 0 <= self.v_loss_layer <= self.layers[-1]:
            # the residual is added to the last edited layer's output; a loss read there or before
            # cannot see it through attention (zero gradient, the targets never move)
            raise HParamsError(
                f"{source}: key 'v_loss_layer' ({self.v_loss_layer}) must be after the last edited layer "
                f"({self.layers[-1]}), or -1 for the model's last layer"
            )


@dataclass
class ZeroUnlearnHyperParams(_EditHyperParams):
    """ZeroUnlearn (multiplicative, few-shot): ``W' = D W``.

    Solve weights: ``forget_weight`` (f), ``utility_weight`` (u), ``regularization`` (r) in
    ``A = f M_n K_f^T + u W C0``, ``B = f K_f K_f^T + u C0``, ``D = P (A + r W) W^T (W (B + r I) W^T)^-1``.
    ``projection_eps`` is eps in ``P = (1 + eps) I - V V^T`` (0 = exact projector).
    """

    ALG_NAME: ClassVar[str] = "ZeroUnlearn"
    REQUIRED_KEYS: ClassVar[tuple] = ("utility_weight",)

    forget_weight: float = 1.0
    utility_weight: float = 15000.0
    regularization: float = 1.0
    projection_eps: float = 0.0
    projection_rank_tol: float = 1e-6
    # Retain-aware ZeroUnlearn (opt-in, 0 = the paper): rho of the retain term in D0, and
    # lam_r / lam_0 of the retain-aware projector (linalg.zerounlearn.retain_aware_projector)
    retain_weight: float = 0.0
    projection_retain_weight: float = 0.0
    projection_utility_weight: float = 0.0

    def retain_weights(self) -> Dict[str, float]:
        return {
            "retain_weight": self.retain_weight,
            "projection_retain_weight": self.projection_retain_weight,
            "projection_utility_weight": self.projection_utility_weight,
        }

    def retain_set_weights(self) -> Dict[str, float]:
        return {"retain_weight": self.retain_weight, "projection_retain_weight": self.projection_retain_weight,
                "target_retain_weight": self.target_retain_weight}

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        for key in ("forget_weight", "utility_weight", "regularization", "projection_eps"):
            if getattr(self, key) < 0:
                raise HParamsError(f"{source}: key {key!r} must be >= 0, got {getattr(self, key)!r}")
        if not 0 <= self.projection_rank_tol < 1:
            raise HParamsError(f"{source}: key 'projection_rank_tol' must be in [0, 1), got {self.projection_rank_tol!r}")


@dataclass
class ZeroUnlearnGDHyperParams(_EditHyperParams):
    """ZeroUnlearn-GD (additive, many samples): ``W' = W + E P_m``.

    Objective per layer: ``a ||M_f^T W' K_f||^2 + b ||W' K_f - M_n||^2 + c ||E P_m||^2`` with
    ``P_m`` the projector onto the null space of ``C0`` (eigenvalues below ``nullspace_threshold``).
    ``solver: exact`` solves the stationarity equation in closed form; ``solver: gd`` runs Adam.
    """

    ALG_NAME: ClassVar[str] = "ZeroUnlearn-GD"

    orthogonality_weight: float = 1.0
    target_weight: float = 100.0
    norm_weight: float = 0.1
    nullspace_threshold: float = 1e-2
    solver: Literal["exact", "gd"] = "exact"
    gd_steps: int = 2000
    gd_lr: float = 1e-2  # relative: scaled by the size of the solution (see linalg.zerounlearn_gd.solve_gd)
    gd_tolerance: float = 1e-10
    # Retain-aware ZeroUnlearn-GD (opt-in, 0 = the paper): the null space is taken of
    # C0 + retain_nullspace_weight * K_r K_r^T / n_r (linalg.zerounlearn_gd.protected_covariance)
    retain_nullspace_weight: float = 0.0
    # Relation-context protection (opt-in, 0 = the paper; needs no retain set): the null space also
    # avoids context_nullspace_weight * the mean k k^T of the forget (and retain) prompts' tokens
    # other than the subject's last one
    context_nullspace_weight: float = 0.0
    # which tokens that context is: "all" (every token but the first and the subject's last) or "subject"
    # (the subject's tokens before its last one, e.g. "Toyota" in "Toyota Corolla"; issue 10's position probe)
    context_positions: str = "all"
    # Soft protection (opt-in, 0 = the paper; solver: exact): the objective gains
    # tr(D_m (utility_penalty_weight C0 + retain_penalty_weight K_r K_r^T) D_m^T), i.e. the mean squared
    # change of a general-text value and the summed squared change of the retain values
    # (linalg.zerounlearn_gd.penalty_matrix)
    utility_penalty_weight: float = 0.0
    retain_penalty_weight: float = 0.0

    def retain_weights(self) -> Dict[str, float]:
        return {"retain_nullspace_weight": self.retain_nullspace_weight, "retain_penalty_weight": self.retain_penalty_weight}

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        for key in ("orthogonality_weight", "target_weight", "norm_weight", "nullspace_threshold"):
            if getattr(self, key) < 0:
                raise HParamsError(f"{source}: key {key!r} must be >= 0, got {getattr(self, key)!r}")
        if self.gd_steps < 1 or not self.gd_lr > 0 or self.gd_tolerance < 0:
            raise HParamsError(
                f"{source}: keys 'gd_steps' (>= 1), 'gd_lr' (> 0) and 'gd_tolerance' (>= 0) got "
                f"{self.gd_steps!r}, {self.gd_lr!r}, {self.gd_tolerance!r}"
            )
        if self.context_positions not in ("all", "subject"):
            raise HParamsError(
                f"{source}: key 'context_positions' must be 'all' or 'subject', got {self.context_positions!r}"
            )
        if self.context_positions != "all" and self.context_nullspace_weight == 0:
            raise HParamsError(
                f"{source}: key 'context_positions: {self.context_positions}' has no effect with "
                "'context_nullspace_weight: 0'; set a weight > 0 (e.g. 1.0) or drop the key"
            )
        for key in ("context_nullspace_weight", "utility_penalty_weight"):
            if not 0 <= getattr(self, key) < float("inf"):
                raise HParamsError(f"{source}: key {key!r} must be finite and >= 0, got {getattr(self, key)!r}")
        if self.solver != "exact" and (self.utility_penalty_weight > 0 or self.retain_penalty_weight > 0):
            raise HParamsError(
                f"{source}: keys 'utility_penalty_weight' / 'retain_penalty_weight' need 'solver: exact' "
                f"(the iterative solver minimises the paper's objective only), got solver {self.solver!r}"
            )
        if self.norm_weight == 0 and self.target_weight == 0:
            raise HParamsError(f"{source}: 'norm_weight' and 'target_weight' cannot both be 0")
