"""The post-MLP map (how the edited module's output reaches the residual) and its inverse on the value."""
from __future__ import annotations

import pytest
import torch

from arch_zoo import tiny_config_model
from tiny_models import tiny_tokenizer
from zerounlearn_editor.engine.architectures import detect_templates
from zerounlearn_editor.engine.post_mlp import (
    IDENTITY,
    PostMlpMap,
    UnsupportedResidualPath,
    apply_post_mlp,
    detect_post_mlp_maps,
    value_change,
    value_targets,
)

D, N = 12, 3


def _rms(seed: int = 0, offset: float = 0.0) -> PostMlpMap:
    g = torch.Generator().manual_seed(seed)
    return PostMlpMap(kind="rms", gain=torch.rand(D, generator=g, dtype=torch.float64) + 0.5 + offset, eps=1e-6,
                      module="post")


def _small_on_image(spec: PostMlpMap, v: torch.Tensor, size: float) -> torch.Tensor:
    """A residual change that keeps ``f(v) + delta`` on the norm's image: ``f(v') - f(v)`` for a nearby ``v'``."""
    g = torch.Generator().manual_seed(3)
    other = v + size * torch.randn(v.shape, generator=g, dtype=torch.float64)
    return apply_post_mlp(spec, other) - apply_post_mlp(spec, v)


def test_identity_and_scale_are_exact():
    g = torch.Generator().manual_seed(0)
    v, delta = torch.randn(D, N, generator=g, dtype=torch.float64), torch.randn(D, N, generator=g, dtype=torch.float64)
    assert torch.equal(value_change(IDENTITY, v, delta), delta)
    half = PostMlpMap(scale=0.5)
    dv = value_change(half, v, delta)
    assert torch.allclose(apply_post_mlp(half, v + dv) - apply_post_mlp(half, v), delta, atol=1e-12)
    W, K = torch.randn(D, 5, generator=g, dtype=torch.float64), torch.randn(5, N, generator=g, dtype=torch.float64)
    assert torch.equal(value_targets(W, K, delta), W @ K + delta)  # the paper's formula, bit for bit


@pytest.mark.parametrize("kind", ["rms", "layer_norm"])
def test_norm_inverse_reaches_reachable_targets(kind):
    spec = _rms(1)
    if kind == "layer_norm":
        spec = PostMlpMap(kind="layer_norm", gain=spec.gain, bias=torch.linspace(-1, 1, D, dtype=torch.float64),
                          eps=1e-6, scale=0.7)
    g = torch.Generator().manual_seed(2)
    v = 3.0 * torch.randn(D, N, generator=g, dtype=torch.float64)
    delta = _small_on_image(spec, v, 0.8)
    dv = value_change(spec, v, delta)
    reached = apply_post_mlp(spec, v + dv) - apply_post_mlp(spec, v)
    assert torch.allclose(reached, delta, atol=1e-8)
    # the naive additive target (the bug of issue 28) misses it by a lot
    naive = apply_post_mlp(spec, v + delta) - apply_post_mlp(spec, v)
    assert (naive - delta).norm() > 0.1 * delta.norm()
    assert torch.allclose(value_change(spec, v, torch.zeros_like(v)), torch.zeros_like(v))


def test_norm_inverse_reaches_the_closest_point_of_the_norms_image():
    """A target off the RMS norm's image: the output written is the image's point closest to ``f(v) + delta``
    (Gemma-3-270m's post-feedforward gains spread widely; the radial map back through them, the inverse before,
    wrote changes farther from the wanted ones than no change: benchmarks/RESULTS.md section 12.2)."""
    spec = PostMlpMap(kind="rms", gain=torch.linspace(0.05, 3.0, D, dtype=torch.float64), eps=1e-6, module="post")
    g = torch.Generator().manual_seed(5)
    v = torch.randn(D, N, generator=g, dtype=torch.float64)
    delta = 3.0 * torch.randn(D, N, generator=g, dtype=torch.float64)  # beyond the norm's reach
    dv = value_change(spec, v, delta)
    assert torch.allclose((v + dv).norm(dim=0), v.norm(dim=0))
    target = apply_post_mlp(spec, v) + delta
    error = (apply_post_mlp(spec, v + dv) - target).norm(dim=0)  # [N]
    assert bool((error < delta.norm(dim=0)).all())  # closer than no change
    samples = apply_post_mlp(spec, torch.randn(D, 20000, generator=g, dtype=torch.float64))  # points of the image
    for j in range(N):
        nearest_sample = (samples - target[:, j : j + 1]).norm(dim=0).min()
        assert float(error[j]) <= float(nearest_sample) + 1e-9


def test_zero_gain_coordinates_keep_their_value():
    gain = torch.ones(D, dtype=torch.float64)
    gain[0] = 0.0
    spec = PostMlpMap(kind="rms", gain=gain, eps=1e-6)
    v = torch.randn(D, N, dtype=torch.float64)
    dv = value_change(spec, v, _small_on_image(spec, v, 0.3))
    assert torch.isfinite(dv).all()


EXPECTED = {"gemma2": "rms", "gemma3": "rms", "olmo2": "rms"}


@pytest.mark.parametrize("arch", ["llama", "gpt2", "opt", "granite", "gemma2", "gemma3", "olmo2", "falcon"])
def test_detected_map_reproduces_the_layer(arch):
    tok = tiny_tokenizer()
    model = tiny_config_model(arch, tok, layers=3, seed=1)
    with torch.no_grad():  # non-trivial norm gains, so an identity or a wrong gain would show
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    t = detect_templates(model)
    maps = detect_post_mlp_maps(model, t["layer_module_tmp"], t["rewrite_module_tmp"], [0, 2])
    for layer, spec in maps.items():
        assert spec.kind == EXPECTED.get(arch, "identity")
        assert spec.scale == pytest.approx(0.5 if arch == "granite" else 1.0)
        if spec.kind == "rms":  # the fitted gain is the module's own (Gemma: 1 + weight)
            norm = dict(model.named_modules())[spec.module]
            x = torch.randn(4, norm.weight.shape[0])
            fitted = apply_post_mlp(spec, x.double().t()).t()
            assert torch.allclose(fitted.float(), norm(x), atol=1e-4)
            assert spec.module.endswith(f"{layer}.post_feedforward_layernorm")


def test_unknown_residual_path_is_refused():
    tok = tiny_tokenizer()
    model = tiny_config_model("llama", tok, layers=2)
    with pytest.raises(UnsupportedResidualPath, match=r"model\.layers\.1.*up_proj"):
        detect_post_mlp_maps(model, "model.layers.{}", "model.layers.{}.mlp.up_proj", [1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_llama_is_added_as_is(dtype):
    """The residual's rounding must not turn Llama's plain addition into a scale near 1 (the paper's formula)."""
    tok = tiny_tokenizer()
    model = tiny_config_model("llama", tok, layers=3, seed=2).to(dtype)
    maps = detect_post_mlp_maps(model, "model.layers.{}", "model.layers.{}.mlp.down_proj", [0, 1, 2])
    assert all(spec.is_identity for spec in maps.values())
    gemma = tiny_config_model("gemma3", tok, layers=2, seed=2).to(dtype)
    assert detect_post_mlp_maps(gemma, "model.layers.{}", "model.layers.{}.mlp.down_proj", [1])[1].kind == "rms"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_with_a_residual_much_larger_than_the_mlp_output(dtype):
    """SmolLM2 in bfloat16 (issue 46): some layers' residual stream is far larger than their MLP output, so a
    perturbation of the MLP output's size drowns in the rounding of ``residual + output``; the probe's perturbation
    is sized by the residual, and the path is still found."""
    tok = tiny_tokenizer()
    model = tiny_config_model("llama", tok, layers=3, seed=2)
    with torch.no_grad():  # the block's norms keep the MLP's input and output the same size; the residual is not
        model.get_input_embeddings().weight.mul_(3000.0)
    model = model.to(dtype)
    maps = detect_post_mlp_maps(model, "model.layers.{}", "model.layers.{}.mlp.down_proj", [0, 1, 2])
    assert all(spec.is_identity for spec in maps.values()), maps
