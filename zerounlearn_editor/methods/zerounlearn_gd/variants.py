"""ZeroUnlearn-GD's opt-in variants as rules over a paper YAML (`zerounlearn init-hparams --many / --deep / --retain`).

Each rule turns the paper settings of a model (its edited ``layers``, its depth, its ``norm_weight``) into the keys
that SmolLM2's shipped opt-in file changes relative to ``SmolLM2-135M-Instruct.yaml``; applied to SmolLM2's paper
YAML, each reproduces that file (``tests/methods/test_variant_rules.py``):

- ``many`` (``-many.yaml``, one batch of many facts): the edited layers widen downward from the paper's last edited
  layer (so the targets, read after it, stay the same) to a contiguous span of ``round(7 * num_layers / 30)`` layers
  (SmolLM2 edits 7 of its 30 layers, 12-18, for the paper's 16-18; never fewer than the paper's); no orthogonality
  term (``orthogonality_weight`` 0); answer-suppression targets (``target_objective: suppress_answer``, stopped at
  ``v_early_stop_loss`` 0.01); ``norm_weight`` the paper's times 3/10 (SmolLM2: 1000 -> 300, a looser penalty; the
  factor, not the value, carries over, because the paper's ``norm_weight`` differs by four orders of magnitude
  between models); only facts whose answer's first token is the unedited model's argmax take target steps
  (``suppress_rank_limit`` 0; the others keep their values: measured on SmolLM2, val seeds 1-3, and Gemma-3-270m,
  benchmarks/RESULTS.md 12.18-12.19). Where ``init-hparams`` sets ``v_lr`` by rule (a model without its own YAML),
  ``--many`` takes the rule of answer-suppression targets
  (:func:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.rule_suppress_v_lr`, RESULTS 12.24).
- ``deep`` (``-deep.yaml``): :func:`~zerounlearn_editor.methods.zerounlearn_gd.config.deep_mode_settings`.
- ``retain`` (``-retain.yaml``): ``retain_nullspace_weight`` 0.1 and ``retain_file: null`` (the retain set is given
  at edit time: ``retain=``, ``--retain`` or the key).
- ``retain-many`` (``--many --retain``; ``-retain-many.yaml``, many facts with a retain set): ``many``'s layers,
  answer-suppression targets and ``norm_weight`` x 3/10 (every request stepping: no ``suppress_rank_limit``, not
  measured with a retain set), the orthogonality term kept (the paper's weight), the
  targets stopped at ``v_early_stop_loss`` 0.003, ``retain``'s keys and all-token context protection
  (``context_nullspace_weight`` 0.1).
- ``robust`` (``-robust.yaml``, forgetting that multiple choice, fine-tuning and int4 rounding do not bring back;
  with a retain set): ``retain-many``'s keys, 50 target steps, the answer ranked 8 nats below the 3 likeliest other
  answers of the edit (``rank_below_alternatives``) and the forget keys also read on an int4 copy
  (``quantized_forget_keys``) (measured on SmolLM2: benchmarks/RESULTS.md, "The robust YAML").

:func:`check_variants` refuses any other two together (see :data:`COMBINATION_REFUSALS`).
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

from zerounlearn_editor.methods.zerounlearn_gd.config import deep_mode_settings

__all__ = [
    "VARIANTS",
    "COMBINATION_REFUSALS",
    "MANY_DEPTH_SHARE",
    "MANY_NORM_FACTOR",
    "MANY_RANK_LIMIT",
    "many_layers",
    "many_mode_settings",
    "retain_mode_settings",
    "retain_many_settings",
    "RETAIN_MANY",
    "ROBUST_SETTINGS",
    "robust_settings",
    "variant_settings",
    "check_variants",
    "variant_flags",
]

VARIANTS = ("many", "deep", "retain", "robust")
"""The opt-in variants ``init-hparams`` writes (option ``--<name>``; shipped file ``<model>-<name>.yaml``)."""

RETAIN_MANY = "retain-many"
"""The variant of ``--many`` and ``--retain`` together (shipped file ``<model>-retain-many.yaml``)."""

RETAIN_MANY_STOP = 0.003
"""``-retain-many``'s answer-suppression stop: SmolLM2's -retain-many.yaml (p(answer) < 0.003)."""

MANY_DEPTH_SHARE = (7, 30)
"""``-many``'s edited span as a share of the model's layers: SmolLM2's 7 (layers 12-18) of 30."""

MANY_NORM_FACTOR = (3, 10)
"""``-many``'s ``norm_weight`` over the paper's: SmolLM2's 300 over 1000."""

MANY_RANK_LIMIT = 0
"""``-many``'s ``suppress_rank_limit``: only facts the unedited model gives (answer's first token its argmax) take
target steps (SmolLM2, val n = 1,000, seeds 1-3: PPL +1.3-1.4% -> +0.4-0.5%, Spe 82-90% -> 92-103% of base;
Gemma-3-270m: PPL +30.4% -> +17.1%; benchmarks/RESULTS.md 12.18-12.19)."""

COMBINATION_REFUSALS: Dict[frozenset, str] = {
    frozenset({"many", "deep"}): (
        "both set the targets: --many stops answer-suppression targets at p(answer) < 0.01, --deep optimises EOS "
        "targets to a loss of 0.005; choose one"
    ),
    frozenset({"deep", "retain"}): (
        "no shipped file or measurement combines them (each opt-in YAML changes the paper's in one way); write one "
        "and change the rest with --set"
    ),
    **{frozenset({other, "robust"}): (
        f"--robust already holds --many --retain's keys and sets its own over them (the -robust.yaml files); "
        f"--{other} adds nothing or changes them: write --robust alone and change the rest with --set"
    ) for other in ("many", "deep", "retain")},
}
"""Why each pair of variants is refused together."""


def _round_half_up(value: float) -> int:
    return int(math.floor(value + 0.5))


def many_layers(layers: Sequence[int], num_layers: int) -> List[int]:
    """``-many``'s edited layers: the contiguous span ending at ``max(layers)`` of
    ``max(len(layers), round(7 * num_layers / 30))`` layers (clipped at layer 0), together with ``layers``.
    SmolLM2 (30 layers, paper 16-18): 12-18; Llama-3.2-3B (28, 16-18): 12-18; Qwen3-4B (36, 9-11): 4-11."""
    if not layers:
        raise ValueError("many_layers needs the paper's edited layers, got none")
    share, depth = MANY_DEPTH_SHARE
    last = max(int(l) for l in layers)
    width = max(len(set(layers)), _round_half_up(share * num_layers / depth))
    return sorted(set(range(max(0, last - width + 1), last + 1)) | {int(l) for l in layers})


def many_mode_settings(layers: Sequence[int], num_layers: int, norm_weight: float) -> Dict[str, Any]:
    """The ``-many`` keys for a model of ``num_layers`` layers whose paper YAML edits ``layers`` with ``norm_weight``
    (see the module docstring). A fresh mapping per call."""
    num, den = MANY_NORM_FACTOR
    return {
        "layers": many_layers(layers, num_layers),
        "orthogonality_weight": 0.0,
        "target_objective": "suppress_answer",
        "v_early_stop_loss": 0.01,
        "norm_weight": float(f"{float(norm_weight) * num / den:.6g}"),  # 0.1 -> 0.03, not 0.030000000000000006
        "suppress_rank_limit": MANY_RANK_LIMIT,
    }


def retain_mode_settings() -> Dict[str, Any]:
    """The ``-retain`` keys (retain-aware null space at weight 0.1; the retain set is given at edit time)."""
    return {"retain_file": None, "retain_nullspace_weight": 0.1}


def retain_many_settings(layers: Sequence[int], num_layers: int, norm_weight: float) -> Dict[str, Any]:
    """The ``-retain-many`` keys (``--many --retain``; see the module docstring): ``many``'s keys less its
    orthogonality change, stopped at :data:`RETAIN_MANY_STOP`, with ``retain``'s keys and context protection 0.1."""
    settings = many_mode_settings(layers, num_layers, norm_weight)
    del settings["orthogonality_weight"], settings["suppress_rank_limit"]
    settings.update(retain_mode_settings(), v_early_stop_loss=RETAIN_MANY_STOP, context_nullspace_weight=0.1)
    return settings


ROBUST_SETTINGS: Dict[str, Any] = {
    "v_num_grad_steps": 50,
    "rank_below_alternatives": {"weight": 1.0, "margin": 8.0, "k": 3},
    "quantized_forget_keys": {"scheme": "int4", "weight": 1.0},
}
"""``-robust``'s keys over ``-retain-many``'s (SmolLM2: benchmarks/RESULTS.md, "The robust YAML")."""


def robust_settings(layers: Sequence[int], num_layers: int, norm_weight: float) -> Dict[str, Any]:
    """The ``-robust`` keys (see the module docstring): :func:`retain_many_settings` with :data:`ROBUST_SETTINGS`.
    A fresh mapping per call (the nested settings copied)."""
    settings = retain_many_settings(layers, num_layers, norm_weight)
    settings.update({key: dict(value) if isinstance(value, dict) else value for key, value in ROBUST_SETTINGS.items()})
    return settings


def variant_flags(variant: str) -> str:
    """The ``init-hparams`` options that write ``variant``: ``--many`` or, for ``retain-many``, ``--many --retain``."""
    return "--many --retain" if variant == RETAIN_MANY else f"--{variant}"


def variant_settings(variant: str, paper: Mapping[str, Any], num_layers: int) -> Dict[str, Any]:
    """The keys ``variant`` (one of :data:`VARIANTS` or :data:`RETAIN_MANY`) sets over the paper mapping ``paper`` (a
    YAML's keys: ``layers`` and ``norm_weight`` are read) of a ``num_layers``-layer model."""
    if variant == RETAIN_MANY:
        return retain_many_settings(paper["layers"], num_layers, paper["norm_weight"])
    if variant == "many":
        return many_mode_settings(paper["layers"], num_layers, paper["norm_weight"])
    if variant == "deep":
        return deep_mode_settings()
    if variant == "retain":
        return retain_mode_settings()
    if variant == "robust":
        return robust_settings(paper["layers"], num_layers, paper["norm_weight"])
    raise ValueError(f"unknown variant {variant!r}; choose from {[*VARIANTS, RETAIN_MANY]}")


def check_variants(variants: Sequence[str], method: str) -> Optional[str]:
    """The variant the options ``variants`` ask for (None, one of :data:`VARIANTS`, or :data:`RETAIN_MANY` for
    ``many`` and ``retain``); refuse variants of another method than ZeroUnlearn-GD, and any other two together
    (one-line errors naming the options)."""
    chosen = [v for v in VARIANTS if v in variants]
    if chosen and method != "ZeroUnlearn-GD":
        raise ValueError(f"--{chosen[0]} is a ZeroUnlearn-GD mode; --method is {method}")
    if set(chosen) == {"many", "retain"}:
        return RETAIN_MANY
    refused = [pair for pair in itertools.combinations(chosen, 2) if frozenset(pair) in COMBINATION_REFUSALS]
    if refused:
        first, second = refused[0]
        raise ValueError(f"--{first} and --{second} together are refused: "
                         f"{COMBINATION_REFUSALS[frozenset({first, second})]}")
    return chosen[0] if chosen else None
