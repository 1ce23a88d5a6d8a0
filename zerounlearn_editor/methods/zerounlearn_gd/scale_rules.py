"""ZeroUnlearn-GD settings for a model without a YAML of its own, by rules in measured model quantities.

The paper's settings are not scale-free: ``v_lr`` is an Adam step per residual coordinate, and ``norm_weight`` and
``nullspace_threshold`` are absolute on the key covariance ``C0``'s scale. Copied from another model's YAML they can
be off by orders of magnitude (Llama-3.2-3B's ``v_lr`` 0.1 on Gemma-3-270m, whose residual RMS after layer 5 is
139 on text, 17x SmolLM2's at its layer 18, moves the residual by at most 2.5 per coordinate in 25 steps, about 2% of
its norm: the targets stay at losses of 9-13; benchmarks/RESULTS.md section 12.2).
Each rule keeps one ratio of the reference model, SmolLM2-135M-Instruct's shipped YAML (the only paper YAML tuned on
real weights here, at layers 16-18), and rescales it by the new model's measured quantity
(:class:`ModelScales`, measured by :func:`zerounlearn_editor.harness.model_scales.measure_scales`):

- ``v_lr`` = 0.5 x ``residual_rms`` / ``REFERENCE.residual_rms``: the Adam step in units of the residual's RMS per
  coordinate at the last edited layer (text tokens, first position left out).
  For answer-suppression targets (``--many``, :func:`rule_suppress_v_lr`; also the plain and ``--retain`` YAMLs
  behind a post-MLP norm, with neutral targets, 75 steps and a repair round, :func:`rule_post_norm_targets`, measured
  in RESULTS 12.34-12.35 rather than argued): 0.5 x ``residual_median_abs`` /
  ``REFERENCE.residual_median_abs``, the step in units of the residual's median absolute coordinate. Adam moves
  every coordinate by about ``v_lr`` a step, and a few outsized coordinates set the RMS: Gemma-3-270m's RMS after
  layer 5 is 27x its median coordinate, SmolLM2's 2.9x. Pushing one answer below p = 0.01 needs far less than the
  neutral target's move, and the RMS step overshoots it: on Gemma-3-270m's ``--many`` edits a smaller step kept
  more neighbours and cost less perplexity at the same forgetting (benchmarks/RESULTS.md 12.24). SmolLM2 gets
  its 0.5 either way.
- ``nullspace_threshold`` = 3e-2 x ``c0_median`` / ``REFERENCE.c0_median`` and ``norm_weight`` = 1000 x the same
  ratio: both are absolute on ``C0``'s eigenvalues (the threshold selects eigenvalues; ``norm_weight`` weighs
  ``|E P_m|^2`` against ``|E P_m k|^2`` terms), so they scale with its median eigenvalue (mean over the edited
  layers). Rescaling every key by ``s`` scales both by ``s^2`` and leaves the edit unchanged.
- ``clamp_norm_factor`` = 0.75, or, where the edited output passes a norm before the residual (Gemma-2/3's
  post-feedforward RMSNorm), ``min(0.75, sum_l |f(v_l)| / |h|)``: a norm fixes its output's size, so edited layer
  ``l`` writes a residual change of about ``|f(v_l)|`` at most in a new direction, and a target farther than their
  sum is not reachable (``|h|``: the residual's norm at the last edited layer).
- ``mom2_n_samples`` x ``mom2_max_length``: the reference's tokens per key dimension (400 x 128 / 1536 = 33.3),
  128-token passages: ``round(400 x d_in / 1536)`` passages.

The text weight by key reach (the plain and ``--retain`` YAMLs; ``--many`` behind a norm takes a fixed weight,
below), where the edited layers' MLP output passes a norm before the residual (Gemma-2/3):
``nullspace_text_weight: {key_reach: 0.6}`` (:func:`rule_text_weight`). The
paper's isotropic null-space penalty lets the first edited layer write most of the asked value change where its
forget keys reach far into the null space; weighting each null direction by its text variance down to a reach of 0.6
took Gemma-3-270m's n = 50 report edits (layers 3-5, reach 3.4) from PPL +11.6% to +2.3% with the forgetting goal
met. Without such a norm it was not a rule: on SmolLM2 at layers 16-18 (reach 0.9) it changed little (PPL 0.5 points
lower), at the layers 1-3 its trace picks (reach 3.6-5.1) it left 3-5 of 10 facts answered where the paper's
penalty left none (benchmarks/RESULTS.md section 12.14 on; the paper's penalty is ``nullspace_text_weight: null``).

The ``--many`` YAML behind such a norm (:func:`rule_post_norm_many`): contexts 2 of 5 tokens, ``nullspace_threshold``
x10, ``nullspace_text_weight`` 200 (the penalty weighted by the text's variance), one repair round and the
retain-aware key (``retain_nullspace_weight`` 0.1, acting when a retain set is given): Gemma-3-270m's shipped
``-many.yaml`` settings, chosen on its train file and measured on val n = 1,000 over five draws (benchmarks/RESULTS.md
12.4, 12.12, 12.16, 12.29-12.32), with answer-suppression targets only (``init-hparams`` leaves the rule out with
``--set target_objective=neutral``). Measured on the one post-norm model here, a rule for its family, not shown on
others.

The plain YAML behind such a norm (:func:`rule_post_norm_targets`): ``v_lr`` by the median coordinate, 75 target
steps (3 x 25) and one repair round. Without a retain set, over 11 n = 50 report draws of Gemma-3-270m's known
CounterFact facts (val seeds 1-5, train records 7000-8999 and 3000-4999 seeds 1-3) it left 16 of 550 facts answered
and kept 171 of 214 neighbour answers (80%) at PPL at most +2.0% with BOS, where the RMS step and one edit left 61
answered and kept 156 (benchmarks/RESULTS.md 12.35; n = 10: 1 of 50, 11 of 14).

The ``--retain`` YAML behind such a norm (:func:`rule_post_norm_retain`): the same keys and the text weight by key
reach, over the retain-aware key. With a retain set of
86-100 other known facts (same answer first, then same relation), Gemma-3-270m's n = 50 edits (val seeds 1-5) left
11 of 250 facts answered, kept 77 of 102 neighbour answers (75%) at PPL +0.8% to +2.4% (windows opening with BOS;
as tokenized up to +6.6%, above +3% on four draws), where the rules YAML before 12.35 (no retain set) left 20
answered and kept 72 (benchmarks/RESULTS.md 12.34). Measured on the one post-norm model here; without such a norm
``--retain`` adds the retain key only.

Otherwise the context prefixes are not set by rule: they stay the base YAML's (5 of 10 tokens). For the plain YAML
SmolLM2's 2 of 5 cut Gemma-3-270m's edit time per fact to 1.1x SmolLM2's but raised its perplexity cost in every run
measured (benchmarks/RESULTS.md section 12.5).

Pure functions of floats; :func:`rule_settings` gives the keys. A model whose own YAML ships keeps it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Sequence

__all__ = ["ModelScales", "ReferenceScales", "REFERENCE", "RULES_VERSION", "FIRST_TRY_KEY_REACH", "round_sig",
           "rule_v_lr", "rule_suppress_v_lr", "rule_solve_weights", "rule_clamp", "rule_mom2", "rule_settings",
           "rule_text_weight", "POST_NORM_MANY", "POST_NORM_MANY_MEASURED_ON", "rule_post_norm_many",
           "POST_NORM_TARGETS", "POST_NORM_TARGETS_MEASURED_ON", "rule_post_norm_targets", "rule_post_norm_retain",
           "describe_rules"]


@dataclass(frozen=True)
class ModelScales:
    """A model's measured quantities at its edited layers (see the module docstring).

    ``residual_rms``: mean over tokens of the RMS per coordinate of the residual after the last edited layer;
    ``residual_norm``: mean norm of the same vectors; ``residual_median_abs``: mean over the same tokens of the
    median absolute coordinate (``None`` where not measured); ``c0_medians``: the median eigenvalue of ``C0`` per edited
    layer; ``post_mlp_norms``: mean ``|f(v)|`` of what each edited layer's MLP adds through a norm, or ``None``
    where the MLP output is added as is; ``key_dim``: the edited module's input width ``d_in``."""

    residual_rms: float
    residual_norm: float
    c0_medians: Sequence[float]
    key_dim: int
    post_mlp_norms: Optional[Sequence[float]] = None
    residual_median_abs: Optional[float] = None

    @property
    def c0_median(self) -> float:
        """Mean over the edited layers of ``C0``'s median eigenvalue."""
        return sum(self.c0_medians) / len(self.c0_medians)


@dataclass(frozen=True)
class ReferenceScales:
    """The reference model's quantities and shipped settings the rules keep the ratios of."""

    name: str
    residual_rms: float
    residual_median_abs: float
    c0_median: float
    v_lr: float
    norm_weight: float
    nullspace_threshold: float
    clamp_norm_factor: float
    mom2_n_samples: int
    mom2_max_length: int
    key_dim: int


REFERENCE = ReferenceScales(
    # measured by measure_scales (50 passages of wiki_passages_3643 at 128 tokens, float32) on
    # SmolLM2-135M-Instruct at its shipped layers 16-18; JSON benchmarks/results/gemma/rules/scales_smollm2_16-18.json
    # (residual_median_abs: benchmarks/results/gemma/target_size/scales_smollm2_16-18.json, the same script)
    name="SmolLM2-135M-Instruct, layers 16-18",
    residual_rms=8.366,
    residual_median_abs=2.898,
    c0_median=0.01582,
    v_lr=0.5,
    norm_weight=1000.0,
    nullspace_threshold=3e-2,
    clamp_norm_factor=0.75,
    mom2_n_samples=400,
    mom2_max_length=128,
    key_dim=1536,
)


RULES_VERSION = 8
"""Changes whenever a rule does (1: ``v_lr``, clamp, solve weights, ``mom2`` sizes; 2: SmolLM2's context prefixes;
3: the base YAML's context prefixes again; 4: the text weight by key reach; 5: ``v_lr`` of answer-suppression
targets by the median coordinate; 6: the ``--many`` YAML's settings behind a post-MLP norm,
:func:`rule_post_norm_many`; 7: the ``--retain`` YAML's behind it, :func:`rule_post_norm_retain`; 8: its target
settings in the plain YAML too, :func:`rule_post_norm_targets`); part of the key of YAMLs cached by rule (``zerounlearn
demo --model gemma3-270m``)."""


def round_sig(value: float, digits: int = 3) -> float:
    """``value`` rounded to ``digits`` significant digits (0 stays 0)."""
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    return value


def rule_v_lr(residual_rms: float, ref: ReferenceScales = REFERENCE) -> float:
    """``v_lr`` = the reference's ``v_lr`` x ``residual_rms / ref.residual_rms`` (3 significant digits)."""
    return round_sig(ref.v_lr * _positive("residual_rms", residual_rms) / ref.residual_rms)


def rule_suppress_v_lr(residual_median_abs: float, ref: ReferenceScales = REFERENCE) -> float:
    """``v_lr`` of answer-suppression targets = the reference's ``v_lr`` x ``residual_median_abs /
    ref.residual_median_abs`` (3 significant digits; see the module docstring)."""
    return round_sig(ref.v_lr * _positive("residual_median_abs", residual_median_abs) / ref.residual_median_abs)


def rule_solve_weights(c0_median: float, ref: ReferenceScales = REFERENCE) -> Dict[str, float]:
    """``{"norm_weight", "nullspace_threshold"}``: the reference's, times ``c0_median / ref.c0_median``."""
    ratio = _positive("c0_median", c0_median) / ref.c0_median
    return {"norm_weight": round_sig(ref.norm_weight * ratio),
            "nullspace_threshold": round_sig(ref.nullspace_threshold * ratio)}


def rule_clamp(residual_norm: float, post_mlp_norms: Optional[Sequence[float]],
               ref: ReferenceScales = REFERENCE) -> float:
    """``clamp_norm_factor``: the reference's, or at most ``sum(post_mlp_norms) / residual_norm`` where the edited
    outputs pass a norm (``post_mlp_norms`` not ``None``)."""
    if post_mlp_norms is None or any(math.isinf(float(n)) for n in post_mlp_norms):  # a layer added as is
        return ref.clamp_norm_factor
    reach = sum(_positive("post_mlp_norms", n) for n in post_mlp_norms) / _positive("residual_norm", residual_norm)
    return round_sig(min(ref.clamp_norm_factor, reach), 2)


def rule_mom2(key_dim: int, ref: ReferenceScales = REFERENCE) -> Dict[str, int]:
    """``{"mom2_n_samples", "mom2_max_length"}``: the reference's tokens per key dimension at its passage length."""
    if int(key_dim) < 1:
        raise ValueError(f"key_dim must be at least 1, got {key_dim!r}")
    n = max(1, int(math.floor(ref.mom2_n_samples * int(key_dim) / ref.key_dim + 0.5)))
    return {"mom2_n_samples": n, "mom2_max_length": ref.mom2_max_length}


def _median_step(scales: ModelScales, ref: ReferenceScales, rule: str) -> float:
    """:func:`rule_suppress_v_lr` of ``scales``; raises naming ``rule`` when they hold no ``residual_median_abs``."""
    if scales.residual_median_abs is None:
        raise ValueError(f"{rule} needs residual_median_abs, which these scales do not hold (measure them with "
                         "harness.model_scales.measure_scales)")
    return rule_suppress_v_lr(scales.residual_median_abs, ref)


def rule_settings(scales: ModelScales, ref: ReferenceScales = REFERENCE,
                  suppress_targets: bool = False) -> Dict[str, Any]:
    """The YAML keys the rules set for a model measured as ``scales`` (a fresh mapping); ``suppress_targets`` (the
    ``--many`` YAML's answer-suppression targets): ``v_lr`` by :func:`rule_suppress_v_lr`."""
    v_lr = (_median_step(scales, ref, "the v_lr rule of answer-suppression targets") if suppress_targets
            else rule_v_lr(scales.residual_rms, ref))
    return {
        "v_lr": v_lr,
        "clamp_norm_factor": rule_clamp(scales.residual_norm, scales.post_mlp_norms, ref),
        **rule_solve_weights(scales.c0_median, ref),
        **rule_mom2(scales.key_dim, ref),
    }


FIRST_TRY_KEY_REACH = 0.6
"""The key reach :func:`rule_text_weight` asks at the first edited layer (chosen on tune data of both real models,
benchmarks/RESULTS.md section 12.14)."""


def _behind_norm(scales: ModelScales) -> bool:
    """Whether every edited layer's MLP output passes a norm (``scales.post_mlp_norms`` given and finite)."""
    norms = scales.post_mlp_norms
    return norms is not None and all(math.isfinite(float(n)) for n in norms)


def rule_text_weight(scales: ModelScales) -> Dict[str, Any]:
    """``{"nullspace_text_weight": {"key_reach": FIRST_TRY_KEY_REACH}}`` where every edited layer's MLP output passes
    a norm (``scales.post_mlp_norms`` finite), else ``{}`` (the paper's penalty); a fresh mapping (module docstring)."""
    if not _behind_norm(scales):
        return {}
    return {"nullspace_text_weight": {"key_reach": FIRST_TRY_KEY_REACH}}


POST_NORM_MANY: Mapping[str, Any] = MappingProxyType({
    "context_template_count": 2,
    "context_template_length": 5,
    "nullspace_text_weight": 200.0,
    "repair_rounds": 1,
    "retain_file": None,
    "retain_nullspace_weight": 0.1,
})
"""The ``--many`` keys of :func:`rule_post_norm_many` besides the threshold (module docstring; read-only)."""

POST_NORM_MANY_MEASURED_ON = "Gemma-3-270m (gemma-3-270m-many.yaml)"
"""Where :func:`rule_post_norm_many`'s settings were measured (the written YAML's header names it)."""

POST_NORM_MANY_THRESHOLD_FACTOR = 10
"""``nullspace_threshold`` of the ``--many`` YAML behind a post-MLP norm over :func:`rule_solve_weights`' (Gemma-3-270m:
0.0151 -> 0.151, RESULTS 12.16)."""


def rule_post_norm_many(scales: ModelScales, ref: ReferenceScales = REFERENCE) -> Dict[str, Any]:
    """The ``--many`` YAML's keys where every edited layer's MLP output passes a norm: :data:`POST_NORM_MANY` and
    ``nullspace_threshold`` :data:`POST_NORM_MANY_THRESHOLD_FACTOR` x the rule's; else ``{}`` (a fresh mapping)."""
    if not _behind_norm(scales):
        return {}
    threshold = rule_solve_weights(scales.c0_median, ref)["nullspace_threshold"]
    return {**POST_NORM_MANY, "nullspace_threshold": round_sig(POST_NORM_MANY_THRESHOLD_FACTOR * threshold)}


POST_NORM_TARGETS: Mapping[str, Any] = MappingProxyType({
    "v_num_grad_steps": 75,
    "repair_rounds": 1,
})
"""The keys of :func:`rule_post_norm_targets` besides the step (read-only)."""

POST_NORM_TARGETS_MEASURED_ON = "Gemma-3-270m (gemma-3-270m-rules.yaml and gemma-3-270m-retain.yaml)"
"""Where :func:`rule_post_norm_targets`' settings were measured (the written YAML's header names it)."""


def rule_post_norm_targets(scales: ModelScales, ref: ReferenceScales = REFERENCE) -> Dict[str, Any]:
    """The neutral-target keys of the plain and ``--retain`` YAMLs where every edited layer's MLP output passes a
    norm: ``v_lr`` by the median coordinate (:func:`rule_suppress_v_lr`), 75 target steps (3 x the paper YAMLs' 25)
    and one repair round (:data:`POST_NORM_TARGETS`); else ``{}`` (a fresh mapping; module docstring)."""
    if not _behind_norm(scales):
        return {}
    return {"v_lr": _median_step(scales, ref, "the target rule behind a post-MLP norm"), **POST_NORM_TARGETS}


def rule_post_norm_retain(scales: ModelScales, ref: ReferenceScales = REFERENCE) -> Dict[str, Any]:
    """The plain and ``--retain`` YAMLs' keys where every edited layer's MLP output passes a norm (named for the
    ``--retain`` YAML, where they were measured first; the plain YAML takes them since RULES_VERSION 8): the text
    weight by key reach (:func:`rule_text_weight`) and :func:`rule_post_norm_targets`; else ``{}`` (a fresh
    mapping)."""
    return {**rule_text_weight(scales), **rule_post_norm_targets(scales, ref)}


def describe_rules(scales: ModelScales, ref: ReferenceScales = REFERENCE) -> str:
    """One line for a YAML header: the measured quantities and the reference they were scaled from."""
    post = ("added as is" if scales.post_mlp_norms is None
            else "through a norm, |f(v)| " + "/".join(f"{n:.3g}" for n in scales.post_mlp_norms))
    median = ("" if scales.residual_median_abs is None
              else f", median coordinate {scales.residual_median_abs:.4g}")
    return (f"residual RMS {scales.residual_rms:.4g} (|h| {scales.residual_norm:.4g}{median}), C0 median eigenvalue "
            f"{scales.c0_median:.4g}, d_in {scales.key_dim}, MLP output {post}; scaled from {ref.name} (residual RMS "
            f"{ref.residual_rms:.4g}, median coordinate {ref.residual_median_abs:.4g}, C0 median {ref.c0_median:.4g})")
