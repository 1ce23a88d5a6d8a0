"""Hyperparameters of the fine-tuning baselines GA and NPO (loaded as strictly as ZeroUnlearn's)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, List, Literal, Optional

from zerounlearn_editor.engine.hparams import BaseHyperParams, HParamsError


@dataclass
class BaselineHyperParams(BaseHyperParams):
    """Fields shared by the GA and NPO baselines.

    ``target_modules: layers`` trains the weight of ``rewrite_module_tmp`` at each of ``layers`` (the
    ZeroUnlearn edit sites), ``all`` every parameter. Each of the ``num_steps`` steps is one
    forward/backward over all requests; ``optimizer`` is ``adam`` (``torch.optim.AdamW``) or ``sgd``
    (no momentum); ``max_grad_norm: null`` disables clipping; ``retain_weight`` weighs the NLL of the
    caller's ``retain_requests``/``retain_texts`` (0: off); ``seed`` seeds the torch RNG inside the
    call (the caller's RNG state is kept).
    """

    layers: List[int] = field(default_factory=list)
    rewrite_module_tmp: str = "model.layers.{}.mlp.down_proj"
    target_modules: Literal["layers", "all"] = "layers"
    num_steps: int = 30
    lr: float = 1e-4
    optimizer: Literal["adam", "sgd"] = "adam"
    weight_decay: float = 0.0
    max_grad_norm: Optional[float] = 1.0
    retain_weight: float = 0.0
    seed: int = 0

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        if self.target_modules == "layers":
            if not self.layers:
                raise HParamsError(f"{source}: key 'layers' must list at least one layer for target_modules 'layers'")
            if "{}" not in self.rewrite_module_tmp:
                raise HParamsError(f"{source}: key 'rewrite_module_tmp' must contain '{{}}' for the layer index")
        if sorted(set(self.layers)) != list(self.layers):
            raise HParamsError(f"{source}: key 'layers' must be strictly increasing, got {self.layers}")
        if self.num_steps < 1:
            raise HParamsError(f"{source}: key 'num_steps' must be >= 1, got {self.num_steps}")
        if not self.lr > 0:
            raise HParamsError(f"{source}: key 'lr' must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise HParamsError(f"{source}: key 'weight_decay' must be >= 0, got {self.weight_decay}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise HParamsError(f"{source}: key 'max_grad_norm' must be > 0 or null, got {self.max_grad_norm}")
        if self.retain_weight < 0:
            raise HParamsError(f"{source}: key 'retain_weight' must be >= 0, got {self.retain_weight}")


@dataclass
class GAHyperParams(BaselineHyperParams):
    """Gradient ascent: maximise the token-mean NLL of the forget answers."""

    ALG_NAME: ClassVar[str] = "GA"


@dataclass
class NPOHyperParams(BaselineHyperParams):
    """Negative preference optimisation (Zhang et al. 2024) with inverse temperature ``beta``."""

    ALG_NAME: ClassVar[str] = "NPO"

    beta: float = 0.1

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        if not self.beta > 0:
            raise HParamsError(f"{source}: key 'beta' must be > 0, got {self.beta}")
