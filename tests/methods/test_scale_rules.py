"""ZeroUnlearn-GD's setting rules (``scale_rules``): each keeps a ratio of the reference model and rescales it by a
measured quantity; the solve weights follow the key covariance's scale so that a rescaled model gets the same edit."""
from __future__ import annotations

import json
import math

import pytest
import torch

from zerounlearn_editor.methods.zerounlearn_gd.scale_rules import (
    REFERENCE,
    ModelScales,
    ReferenceScales,
    round_sig,
    rule_clamp,
    rule_mom2,
    rule_settings,
    rule_solve_weights,
    rule_suppress_v_lr,
    rule_v_lr,
)
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis, solve_exact
from zerounlearn_editor.support.resources import repo_root

REF = ReferenceScales(name="ref", residual_rms=8.0, residual_median_abs=2.0, c0_median=0.02, v_lr=0.5,
                      norm_weight=1000.0, nullspace_threshold=3e-2, clamp_norm_factor=0.75, mom2_n_samples=400,
                      mom2_max_length=128, key_dim=1536)


def test_the_reference_model_gets_its_own_settings_back():
    """SmolLM2's measured quantities give SmolLM2's shipped settings (the rule is a ratio of them)."""
    scales = ModelScales(residual_rms=REFERENCE.residual_rms, residual_norm=200.0,
                         c0_medians=[REFERENCE.c0_median] * 3, key_dim=REFERENCE.key_dim)
    assert rule_settings(scales) == {"v_lr": 0.5, "clamp_norm_factor": 0.75, "norm_weight": 1000.0,
                                     "nullspace_threshold": 0.03, "mom2_n_samples": 400, "mom2_max_length": 128}
    assert math.isfinite(REFERENCE.residual_rms) and math.isfinite(REFERENCE.c0_median)


def test_v_lr_is_an_adam_step_in_units_of_the_residual_rms():
    assert rule_v_lr(8.0, REF) == 0.5
    assert rule_v_lr(160.0, REF) == 10.0  # a residual 20x larger takes 20x larger steps
    assert rule_v_lr(3.3, REF) == round_sig(0.5 * 3.3 / 8.0)
    with pytest.raises(ValueError, match="residual_rms must be a finite positive number"):
        rule_v_lr(0.0, REF)


def test_suppression_targets_step_in_units_of_the_median_coordinate():
    """``--many``'s answer-suppression targets: the Adam step scales with the residual's median absolute coordinate,
    which a few outsized coordinates do not move (Gemma-3-270m: RMS 27x its median coordinate, SmolLM2 2.9x)."""
    assert rule_suppress_v_lr(2.0, REF) == 0.5
    assert rule_suppress_v_lr(3.5, REF) == round_sig(0.5 * 3.5 / 2.0)
    with pytest.raises(ValueError, match="residual_median_abs must be a finite positive number"):
        rule_suppress_v_lr(float("nan"), REF)
    outsized = ModelScales(residual_rms=80.0, residual_norm=1.0, c0_medians=[0.02], key_dim=4,
                           residual_median_abs=4.0)
    assert rule_settings(outsized, REF)["v_lr"] == 5.0  # the RMS rule: 10x the reference's RMS
    assert rule_settings(outsized, REF, suppress_targets=True) == {**rule_settings(outsized, REF), "v_lr": 1.0}
    unmeasured = ModelScales(residual_rms=8.0, residual_norm=1.0, c0_medians=[0.02], key_dim=4)
    with pytest.raises(ValueError, match="needs residual_median_abs"):
        rule_settings(unmeasured, REF, suppress_targets=True)


def test_the_reference_model_keeps_its_v_lr_for_suppression_targets():
    """SmolLM2's own median coordinate gives its shipped -many.yaml's v_lr (0.5), and the reference constant is the
    measurement stored beside RESULTS 12.24."""
    stored = json.loads((repo_root() / "benchmarks" / "results" / "gemma" / "target_size"
                         / "scales_smollm2_16-18.json").read_text())
    assert REFERENCE.residual_median_abs == round_sig(stored["scales"]["residual_median_abs"], 4)
    assert stored["layers"] == [16, 17, 18]
    scales = ModelScales(residual_rms=REFERENCE.residual_rms, residual_norm=200.0,
                         c0_medians=[REFERENCE.c0_median] * 3, key_dim=REFERENCE.key_dim,
                         residual_median_abs=REFERENCE.residual_median_abs)
    assert rule_settings(scales, suppress_targets=True)["v_lr"] == 0.5


def test_solve_weights_follow_the_median_eigenvalue_of_c0():
    assert rule_solve_weights(0.02, REF) == {"norm_weight": 1000.0, "nullspace_threshold": 0.03}
    assert rule_solve_weights(0.002, REF) == {"norm_weight": 100.0, "nullspace_threshold": 0.003}
    scales = ModelScales(residual_rms=8.0, residual_norm=1.0, c0_medians=[0.01, 0.02, 0.06], key_dim=4)
    assert scales.c0_median == pytest.approx(0.03)
    assert rule_settings(scales, REF)["norm_weight"] == 1500.0


def test_keys_rescaled_by_s_give_the_same_edit_under_the_rule():
    """Keys k -> s k with W -> W / s compute the same values; C0 -> s^2 C0, its median eigenvalue too, so the
    rule's threshold and norm_weight scale by s^2 and the update changes every key's value exactly as before."""
    g = torch.Generator().manual_seed(0)
    d_in, d_out, n, s = 12, 6, 3, 7.0
    W = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    basis = torch.linalg.qr(torch.randn(d_in, d_in, generator=g, dtype=torch.float64))[0]
    eig = torch.logspace(-4, 0, d_in, dtype=torch.float64)
    C0 = basis @ torch.diag(eig) @ basis.t()
    K = torch.randn(d_in, n, generator=g, dtype=torch.float64)
    M_n = torch.randn(d_out, n, generator=g, dtype=torch.float64)
    probe = torch.randn(d_in, 5, generator=g, dtype=torch.float64)
    ref = ReferenceScales(**{**REF.__dict__, "c0_median": float(eig.median()), "nullspace_threshold": 0.01,
                             "norm_weight": 0.5})
    changes = []
    for scale in (1.0, s):
        weights = rule_solve_weights(float(torch.linalg.eigvalsh(scale**2 * C0).median()), ref)
        U0, _ = nullspace_basis(scale**2 * C0, weights["nullspace_threshold"])
        assert U0.shape[1] == int((eig < 0.01).sum())  # the same null space
        D = solve_exact(W / scale, scale * K, W @ K, M_n, U0, 1.0, 100.0, weights["norm_weight"])
        changes.append(D @ (scale * probe))  # value change of the same inputs
    assert torch.allclose(changes[0], changes[1], rtol=1e-6, atol=1e-9)


def test_clamp_is_the_reach_of_the_layers_through_a_post_mlp_norm():
    assert rule_clamp(100.0, None, REF) == 0.75  # added as is: the reference's
    assert rule_clamp(1000.0, [100.0, 150.0, 150.0], REF) == 0.4  # a norm caps what each layer writes
    assert rule_clamp(100.0, [50.0, 60.0], REF) == 0.75  # within reach
    assert rule_clamp(100.0, [10.0, math.inf], REF) == 0.75  # one layer added as is
    with pytest.raises(ValueError, match="residual_norm must be a finite positive number"):
        rule_clamp(0.0, [1.0], REF)


def test_statistics_keep_the_tokens_per_key_dimension():
    assert rule_mom2(1536, REF) == {"mom2_n_samples": 400, "mom2_max_length": 128}
    assert rule_mom2(2048, REF) == {"mom2_n_samples": 533, "mom2_max_length": 128}
    assert rule_mom2(8192, REF)["mom2_n_samples"] == 2133
    with pytest.raises(ValueError, match="key_dim must be at least 1"):
        rule_mom2(0, REF)
