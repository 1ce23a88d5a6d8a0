"""ZeroUnlearn's hyperparameters: the shared keys (:class:`~zerounlearn_editor.engine.hparams.EditHyperParams`)
plus its solve weights."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from zerounlearn_editor.engine.hparams import EditHyperParams, HParamsError

__all__ = ["ZeroUnlearnHyperParams"]


@dataclass
class ZeroUnlearnHyperParams(EditHyperParams):
    """ZeroUnlearn (multiplicative, few-shot): ``W' = D W``.

    Solve weights: ``forget_weight`` (f), ``utility_weight`` (u), ``regularization`` (r) in
    ``A = f M_n K_f^T + u W C0``, ``B = f K_f K_f^T + u C0``, ``D = P (A + r W) W^T (W (B + r I) W^T)^-1``.
    """

    ALG_NAME: ClassVar[str] = "ZeroUnlearn"
    REQUIRED_KEYS: ClassVar[tuple] = ("utility_weight",)

    forget_weight: float = field(default=1.0, metadata={"help": "f, weight of the forget term in `A`, `B`"})
    utility_weight: float = field(default=15000.0, metadata={"help": (
        "u, weight of `C0` in `A`, `B` (15000 in the paper)"
    )})
    regularization: float = field(default=1.0, metadata={"help": "r, the ridge `r ||D W - W||^2`"})
    projection_rank_tol: float = field(default=1e-6, metadata={"help": (
        "relative singular-value cut-off of the forget values' span `V`"
    )})

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        for key in ("forget_weight", "utility_weight", "regularization"):
            if getattr(self, key) < 0:
                raise HParamsError(f"{source}: key {key!r} must be >= 0, got {getattr(self, key)!r}")
        if not 0 <= self.projection_rank_tol < 1:
            raise HParamsError(
                f"{source}: key 'projection_rank_tol' must be in [0, 1), got {self.projection_rank_tol!r}"
            )
