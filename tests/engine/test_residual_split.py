"""The residual gap ``z - h`` split over the edited layers: the paper's even split, bit for bit."""
from __future__ import annotations

import pytest
import torch

from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import EditStages, batched_statistics, neutral_targets, run_layerwise_edit
from zerounlearn_editor.engine.post_mlp import value_targets
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver


def test_each_layer_is_asked_the_gap_left_over_the_layers_left(tmp_path):
    """``M_n = W K_f + (z - h) / (L - p)`` at position ``p`` of ``L``, ``h`` the hidden state read with the keys."""
    tok = tiny_tokenizer()
    model = sharp_tiny_llama(tok)
    hp = tiny_gd_target_hparams(tmp_path, layers=[1, 2, 3], nullspace_threshold=1e-5)
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

    # the guard reads perplexity only (a random tiny model's, +106% on one CPU): the split is what is checked here
    run_layerwise_edit(model, tok, requests, hp, solver, second_moments=moments, targets=targets,
                       stages=EditStages(keys=keys), progress=False, fluency_guard="off")
    assert len(reads) == len(problems) == 3
    for position, (readout, problem) in enumerate(zip(reads, problems)):
        residual = (targets.z - readout.hidden[:3]).double() / (3 - position)
        assert torch.equal(problem.M_n, value_targets(problem.W, problem.K_f, residual.t()))


def test_the_retired_capacity_split_is_refused_naming_where_it_went(tmp_path):
    with pytest.raises(HParamsError, match=r"'experimental\.layer_split' was retired: .*section 12\.9.*"
                                           r"branch i48-split, commit 4587f79"):
        tiny_gd_target_hparams(tmp_path, experimental={"layer_split": "capacity"})


def test_the_retired_stepped_only_solve_is_refused_naming_where_it_went(tmp_path):
    with pytest.raises(HParamsError, match=r"'experimental\.solve_stepped_only' was retired: .*12\.20.*"
                                           r"branch i48-held, commit d33d868"):
        tiny_gd_target_hparams(tmp_path, experimental={"solve_stepped_only": True})
