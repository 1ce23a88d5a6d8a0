"""ZeroUnlearn-GD's hyperparameters: the shared keys (:class:`~zerounlearn_editor.engine.hparams.EditHyperParams`)
plus its solve and null-space keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Literal, Mapping

from zerounlearn_editor.engine.hparams import (
    EditHyperParams,
    HParamsError,
    check_quantized_keys_setting,
    is_real_number,
)

__all__ = ["KEY_REACH", "TEXT_WEIGHT_KEY", "ZeroUnlearnGDHyperParams", "deep_mode_settings"]

TEXT_WEIGHT_KEY = "nullspace_text_weight"
"""The key of the text-weighted null-space penalty (a number ``w >= 0``, or ``{key_reach: A}``; graduated from
``experimental:``)."""

KEY_REACH = "key_reach"
"""``nullspace_text_weight: {key_reach: A}``: the edit's ``w`` chosen from the forget keys at its first edited layer
(``solve.relative_text_weight``, ``method.edit_text_weight``)."""


def deep_mode_settings() -> Dict[str, Any]:
    """The deep-forgetting mode (opt-in, ``hparams/ZeroUnlearn-GD/<model>-deep.yaml``): these keys over a paper YAML.

    Targets optimised to a lower loss (EOS NLL 0.005, up to 50 steps) inside a looser norm clamp (1.5), over 8
    sampled context prefixes of 10 tokens and 4 few-shot prefixes of hand-written facts
    (``fewshot_contexts``): keys and targets also see in-context prompts, which then no longer bring the answer back
    (measured on SmolLM2 with its costs: benchmarks/RESULTS.md, "Deep forgetting"). A fresh mapping per call;
    ``zerounlearn init-hparams --deep`` applies it.
    """
    return {
        "context_template_count": 8,
        "context_template_length": 10,
        "v_num_grad_steps": 50,
        "clamp_norm_factor": 1.5,
        "v_early_stop_loss": 0.005,
        "fewshot_contexts": 4,
    }


@dataclass
class ZeroUnlearnGDHyperParams(EditHyperParams):
    """ZeroUnlearn-GD (additive, many samples): ``W' = W + E P_m``.

    Objective per layer: ``a ||M_f^T W' K_f||^2 + b ||W' K_f - M_n||^2 + c ||E P_m||^2`` with
    ``P_m`` the projector onto the null space of ``C0`` (eigenvalues below ``nullspace_threshold``).
    ``solver: exact`` solves the stationarity equation in closed form; ``solver: gd`` runs Adam.
    """

    ALG_NAME: ClassVar[str] = "ZeroUnlearn-GD"
    orthogonality_weight: float = field(default=1.0, metadata={"help": "a, weight of `||M_f^T W' K_f||^2`"})
    target_weight: float = field(default=100.0, metadata={"help": "b, weight of `||W' K_f - M_n||^2`"})
    norm_weight: float = field(default=0.1, metadata={"help": "c, weight of `||E P_m||^2`"})
    nullspace_threshold: float = field(default=1e-2, metadata={"help": (
        "eigenvalues of `C0` below this span the null space `P_m`"
    )})
    solver: Literal["exact", "gd"] = field(default="exact", metadata={"help": (
        "`exact` (closed form) or `gd` (Adam, then conjugate gradient)"
    )})
    gd_steps: int = field(default=2000, metadata={"help": "`solver: gd`: at most this many Adam steps"})
    # relative to the size of the solution (solve.solve_gd)
    gd_lr: float = field(default=1e-2, metadata={"help": (
        "`solver: gd`: learning rate, relative to the size of the solution"
    )})
    # opt-in, see solve.protected_covariance
    retain_nullspace_weight: float = field(default=0.0, metadata={"help": (
        "retain-aware (ZeroUnlearn-GD+R; opt-in, 0 = the paper): the null space is taken of `C0 + lam K_r K_r^T / "
        "n_r` over the retain set's keys"
    )})
    # opt-in, see solve.protected_covariance
    context_nullspace_weight: float = field(default=0.0, metadata={"help": (
        "opt-in, 0 = the paper (no retain set needed): the null space also avoids this times the mean `k k^T` of the "
        "prompts' other tokens (their relation context)"
    )})

    # opt-in ({scheme, weight} or null; checked by check_quantized_keys_setting), see engine.quantized_keys
    quantized_forget_keys: Any = field(default=None, metadata={"help": (
        "opt-in, `null` = the paper; `{scheme, weight}` (the `-robust.yaml` files: int4, 1.0): every forget "
        "request's keys are also read on an RTN-quantized copy of the model being edited (`scheme`: `int8`, `int4` "
        "per channel, `int4g16`) and added to the solve as extra columns scaled by `sqrt(weight)`, with the "
        "request's own residual, so that rounding the edited model does not bring the answer back"
    )})

    # opt-in (a number >= 0 or {key_reach: A}; null or 0 = the paper), see solve.text_weighted_basis
    nullspace_text_weight: Any = field(default=None, metadata={"help": (
        "opt-in, `null` or 0 = the paper; `w >= 0`: the penalty `c ||E P_m||^2` becomes `c sum_j (1 + w e_j / t) "
        "||E u_j||^2` over the null directions `u_j` (eigenvalue `e_j` of the protected `C0`, `t` the "
        "`nullspace_threshold`), so each costs its share of the change on the statistics' text; or `{key_reach: "
        "A}` (what `init-hparams` writes where the MLP output passes a norm, e.g. Gemma-3: 0.6): `w` is set at the "
        "edit's first edited layer so that its key reach `(b / c) sum_j s_j / (1 + w e_j / t) / n` is `A` (`s_j` "
        "the n forget keys' energy on `u_j`; `w = 0` where the paper's reach is already at most `A`) and kept for "
        "the later layers (logged per layer; benchmarks/RESULTS.md, 12.14 on)"
    )})

    # opt-in (0 = the paper's one edit), see methods.zerounlearn_gd.repair
    repair_rounds: int = field(default=0, metadata={"help": (
        "opt-in, 0 = the paper's one edit; `R` (an integer >= 0): after the edit, the requests whose answer's first "
        "token is still the argmax after the bare prompt are edited again, alone, on the edited model (targets read "
        "from it; the same statistics, retain set and guard), up to `R` rounds (`init-hparams` writes 1 where the "
        "MLP output passes a norm, in the plain, --many and --retain YAMLs: gemma-3-270m-rules.yaml, "
        "gemma-3-270m-many.yaml, gemma-3-270m-retain.yaml; benchmarks/RESULTS.md, 12.32-12.35)"
    )})

    def retain_weights(self) -> Dict[str, float]:
        return {"retain_nullspace_weight": self.retain_nullspace_weight}

    def needs_context_moment(self) -> bool:
        return self.context_nullspace_weight > 0

    def validate(self, source: str = "<hparams>") -> None:
        super().validate(source)
        for key in ("orthogonality_weight", "target_weight", "norm_weight", "nullspace_threshold"):
            if getattr(self, key) < 0:
                raise HParamsError(f"{source}: key {key!r} must be >= 0, got {getattr(self, key)!r}")
        if self.gd_steps < 1 or not self.gd_lr > 0:
            raise HParamsError(
                f"{source}: keys 'gd_steps' (>= 1) and 'gd_lr' (> 0) got {self.gd_steps!r}, {self.gd_lr!r}"
            )
        if not 0 <= self.context_nullspace_weight < float("inf"):
            raise HParamsError(
                f"{source}: key 'context_nullspace_weight' must be finite and >= 0, got "
                f"{self.context_nullspace_weight!r}"
            )
        if self.nullspace_text_weight is not None:
            self._check_text_weight(source)
        if self.quantized_forget_keys is not None:
            check_quantized_keys_setting(self.quantized_forget_keys, source)
        if isinstance(self.repair_rounds, bool) or not isinstance(self.repair_rounds, int) or self.repair_rounds < 0:
            raise HParamsError(f"{source}: key 'repair_rounds' must be an integer >= 0, got {self.repair_rounds!r}")
        if self.repair_rounds and (self.fewshot_contexts or self.rank_below_alternatives is not None):
            raise HParamsError(
                f"{source}: key 'repair_rounds' cannot be combined with 'fewshot_contexts' or "
                "'rank_below_alternatives' (a round would draw its few-shot prefixes and rank alternatives from its "
                "few requests alone; not measured together): set repair_rounds: 0 or remove those keys")
        if self.norm_weight == 0 and self.target_weight == 0:
            raise HParamsError(f"{source}: 'norm_weight' and 'target_weight' cannot both be 0")

    def _check_text_weight(self, source: str) -> None:
        """:class:`HParamsError` unless ``nullspace_text_weight`` is a finite number >= 0, and > 0 only
        with ``nullspace_threshold > 0`` (the weight is relative to it); or ``{key_reach: A}`` with a finite ``A >
        0``, ``nullspace_threshold > 0`` and ``norm_weight > 0``."""
        value = self.nullspace_text_weight
        key = TEXT_WEIGHT_KEY
        if isinstance(value, Mapping):
            self._check_key_reach(source, key, value)
            return
        if not is_real_number(value) or not 0 <= value < float("inf"):
            raise HParamsError(f"{source}: key {key!r} must be a finite number >= 0 (0: the paper) or "
                               f"{{{KEY_REACH}: A}} with A > 0, got {value!r}")
        if value > 0 and not self.nullspace_threshold > 0:
            raise HParamsError(f"{source}: key {key!r} is relative to 'nullspace_threshold', which must then be > 0, "
                               f"got {self.nullspace_threshold!r}")

    def _check_key_reach(self, source: str, key: str, value: Mapping) -> None:
        """The ``{key_reach: A}`` form of :meth:`_check_text_weight`."""
        if set(value) != {KEY_REACH}:
            raise HParamsError(f"{source}: key {key!r} as a mapping takes exactly one key {KEY_REACH!r}, got "
                               f"{sorted(map(str, value))}")
        reach = value[KEY_REACH]
        if not is_real_number(reach) or not 0 < reach < float("inf"):
            raise HParamsError(f"{source}: key '{key}.{KEY_REACH}' must be a finite number > 0, got {reach!r}")
        for name in ("nullspace_threshold", "norm_weight"):
            if not getattr(self, name) > 0:
                raise HParamsError(f"{source}: key '{key}.{KEY_REACH}' needs {name!r} > 0, got "
                                   f"{getattr(self, name)!r}")
