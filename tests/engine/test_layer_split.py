"""``experimental.layer_split``: the residual gap split over the edited layers (even by default, by capacity)."""
from __future__ import annotations

import math

import pytest
import torch
import yaml

from tiny_models import REPO_ROOT, forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.layer_split import (
    gap_portions,
    layer_capacity,
    null_key_fraction,
    post_mlp_gain,
    remaining_gap_shares,
)
from zerounlearn_editor.engine.pipeline import EditStages, batched_statistics, neutral_targets, run_layerwise_edit
from zerounlearn_editor.engine.post_mlp import IDENTITY, PostMlpMap, value_targets
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver

PAPER_GD = REPO_ROOT / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct.yaml"
PAPER_ZU = REPO_ROOT / "hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml"


def test_equal_capacities_give_the_even_split_bit_for_bit():
    for L in (1, 2, 3, 5):
        for value in (1.0, 0.37, 2.0e3):
            shares = remaining_gap_shares(torch.full((L,), value))
            assert shares.tolist() == [1.0 / (L - p) for p in range(L)]


def test_shares_follow_the_capacities_and_the_portions_sum_to_one():
    shares = remaining_gap_shares(torch.tensor([1.0, 2.0, 1.0]))
    assert torch.allclose(shares, torch.tensor([0.25, 2.0 / 3.0, 1.0], dtype=torch.float64))
    assert torch.allclose(gap_portions(shares), torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64))
    caps = torch.tensor([0.3, 5.0, 0.01, 2.0])
    portions = gap_portions(remaining_gap_shares(caps))
    assert torch.allclose(portions, caps.double() / caps.double().sum()) and math.isclose(portions.sum(), 1.0)


def test_a_layer_without_capacity_writes_nothing_and_the_last_takes_the_rest():
    shares = remaining_gap_shares(torch.tensor([0.0, 3.0, 1.0]))
    assert shares.tolist() == [0.0, 0.75, 1.0]
    # every layer left without capacity: the rest is split evenly; the last layer always takes what is left
    assert remaining_gap_shares(torch.tensor([2.0, 0.0, 0.0])).tolist() == [1.0, 0.5, 1.0]
    assert remaining_gap_shares(torch.tensor([1.0, 0.0])).tolist() == [1.0, 1.0]
    for bad in (torch.tensor([]), torch.tensor([1.0, -0.1]), torch.tensor([1.0, float("nan")]), torch.ones(2, 2)):
        with pytest.raises(ValueError, match="capacities must be"):
            remaining_gap_shares(bad)


def test_null_key_fraction_is_the_keys_norm_share_in_the_small_eigenvalue_directions():
    C0 = torch.diag(torch.tensor([2.0, 1.0, 1e-4, 0.0]))
    keys = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0], [3.0, 0.0, 1.0], [4.0, 0.0, 0.0]])  # [d_in, n]
    # null space (eigenvalue < 0.5): directions 3 and 4 -> fractions 1, 0, 1/sqrt(2)
    assert math.isclose(null_key_fraction(C0, keys, 0.5), (1.0 + 0.0 + 2 ** -0.5) / 3)
    assert null_key_fraction(C0, keys, 0.0) == 0.0  # strictly below: nothing below 0
    assert null_key_fraction(C0, torch.zeros(4, 2), 0.5) == 0.0  # a zero key counts 0


def test_post_mlp_gain_is_the_rms_singular_value_of_the_maps_jacobian():
    v = torch.tensor([[3.0, 0.0], [4.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    assert post_mlp_gain(IDENTITY, v) == 1.0
    assert post_mlp_gain(PostMlpMap(scale=-2.0), v) == 2.0
    rms = PostMlpMap(kind="rms", gain=torch.ones(4, dtype=torch.float64), eps=0.0, scale=3.0)
    # J = scale / r (I - v v^T / |v|^2), r = |v| / sqrt(d): |J|_F / sqrt(d) = scale sqrt(d - 1) / |v|
    expected = (3.0 * math.sqrt(3) / 5.0 + 3.0 * math.sqrt(3) / 1.0) / 2
    assert math.isclose(post_mlp_gain(rms, v), expected, rel_tol=1e-12)
    # a larger value passes less residual change per unit value change through the norm
    assert post_mlp_gain(rms, 10 * v) < post_mlp_gain(rms, v)
    C0 = torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0]))
    keys = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    assert math.isclose(layer_capacity(C0, keys, 0.5, rms, v[:, :1]), 2 ** -0.5 * 3.0 * math.sqrt(3) / 5.0)


def _config(path, value):
    config = yaml.safe_load(path.read_text())
    config["experimental"] = {"layer_split": value}
    return config


def test_the_key_is_validated_naming_file_and_key():
    assert ZeroUnlearnGDHyperParams.from_dict(_config(PAPER_GD, "capacity")).experimental == {
        "layer_split": "capacity"}
    for bad in ("even", "Capacity", 1, None):
        with pytest.raises(HParamsError, match=r"x\.yaml: key 'experimental\.layer_split' must be one of "
                                               r"\['capacity'\] \(absent: the paper's even split\)"):
            ZeroUnlearnGDHyperParams.from_dict(_config(PAPER_GD, bad), source="x.yaml")
    with pytest.raises(HParamsError, match=r"x\.yaml: key 'experimental\.layer_split' needs a method with a "
                                           r"'nullspace_threshold'"):
        ZeroUnlearnHyperParams.from_dict(_config(PAPER_ZU, "capacity"), source="x.yaml")


def _edit(tmp_path, **changes):
    """One ZeroUnlearn-GD edit of three facts at layers 1, 2, 3 of the sharp tiny Llama; every key read and every
    layer problem recorded. Returns ``(hparams, targets, reads, problems, moments)``."""
    tok = tiny_tokenizer()
    model = sharp_tiny_llama(tok)
    # the tiny statistics' C0 eigenvalues run 3e-7 .. 5e-4: a threshold near their median leaves each layer a part
    hp = tiny_gd_target_hparams(tmp_path, layers=[1, 2, 3], nullspace_threshold=1e-5, **changes)
    requests = forget_requests()
    targets = neutral_targets(model, tok, requests, hp)
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset)
    reads, problems = [], []

    def keys(*args, **kwargs):
        reads.append(read_keys_and_hidden(*args, **kwargs))
        return reads[-1]

    def solver(problem):
        problems.append(problem)
        return zerounlearn_gd_solver(hp)(problem)

    run_layerwise_edit(model, tok, requests, hp, solver, second_moments=moments, targets=targets,
                       stages=EditStages(keys=keys), progress=False)
    return hp, targets, reads, problems, moments


def test_without_the_key_each_layer_is_asked_the_gap_left_over_the_layers_left(tmp_path):
    """The paper's split, bit for bit: ``M_n = W K_f + (z - h) / (L - p)`` from the hidden state read with the keys."""
    hp, targets, reads, problems, _ = _edit(tmp_path)
    assert len(reads) == len(problems) == 3
    for position, (readout, problem) in enumerate(zip(reads, problems)):
        residual = (targets.z - readout.hidden[:3]).double() / (3 - position)
        assert torch.equal(problem.M_n, value_targets(problem.W, problem.K_f, residual.t()))


def test_capacity_asks_each_layer_its_capacity_share_of_the_gap_left(tmp_path):
    """One read per layer on the unedited model (the first reused by the loop), then ``M_n = W K_f + s_p (z - h)``
    with ``s`` the capacities' shares of the gap left."""
    hp, targets, reads, problems, moments = _edit(tmp_path, experimental={"layer_split": "capacity"})
    assert len(reads) == 3 + 2 and len(problems) == 3
    capacities = torch.tensor([
        layer_capacity(moments[layer].moment(), readout.keys[:, :3].double(), hp.nullspace_threshold, IDENTITY,
                       problem.W @ readout.keys[:, :3].double())
        for layer, readout, problem in zip(hp.layers, reads[:3], problems)
    ], dtype=torch.float64)
    shares = remaining_gap_shares(capacities)
    assert ((capacities > 0) & (capacities < 1)).all()
    assert not torch.allclose(shares, remaining_gap_shares(torch.ones(3)))
    for position, (readout, problem) in enumerate(zip([reads[0]] + reads[3:], problems)):
        residual = (targets.z - readout.hidden[:3]).double() * float(shares[position])
        assert torch.equal(problem.M_n, value_targets(problem.W, problem.K_f, residual.t()))
