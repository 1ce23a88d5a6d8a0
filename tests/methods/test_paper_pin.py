"""The paper's method (shipped settings, no opt-in extras) keeps giving the same edited weights.

``tests/fixtures/paper_pin.npz`` was written by this file's ``__main__`` from the code before any
opt-in mode (retain sets, new projectors) existed: a tiny seeded Llama, its ``C0`` and neutral
targets, and the weights ZeroUnlearn and ZeroUnlearn-GD wrote. The test feeds the stored ``C0``
and targets back (so it pins keys + solve + write-back, not the target optimiser) into the model with
the stored initial weights (``init__*``, added later from the same seeded model: torch's seeded
initialisation differs by an ulp between CPU kernels, see :func:`tiny_models.pinned_tiny_llama`) and asks
for the pinned edit within 1e-4 of it. Regenerate only on purpose: ``python tests/methods/test_paper_pin.py``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import (  # noqa: E402
    FIXTURES,  # noqa: E402
    forget_requests,
    init_arrays,
    pinned_tiny_llama,
    state_digest,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams  # noqa: E402
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets  # noqa: E402
from zerounlearn_editor.engine.stats import SecondMoment  # noqa: E402
from zerounlearn_editor.engine.targets import NeutralTargets  # noqa: E402
from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model  # noqa: E402
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model  # noqa: E402

PIN = FIXTURES / "paper_pin.npz"
LAYERS = (1, 2)
METHODS = {
    "ZeroUnlearn": (ZeroUnlearnHyperParams, apply_zerounlearn_to_model, dict(utility_weight=10.0)),
    "ZeroUnlearn-GD": (ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model, dict(nullspace_threshold=1e-2)),
}


def _hparams(name: str, tmp: Path):
    cls, _, extra = METHODS[name]
    return cls.from_dict(tiny_hparams_dict(tmp / "stats", write_corpus(tmp / "corpus.jsonl"), alg_name=name, **extra))


def _edited(model, name: str, hp, moments: Dict[int, SecondMoment], targets: NeutralTargets) -> Dict[int, np.ndarray]:
    _, apply, _ = METHODS[name]
    tok = tiny_tokenizer()
    apply(model, tok, forget_requests(), hp, second_moments=moments, targets=targets, progress=False)
    return {l: model.model.layers[l].mlp.down_proj.weight.detach().numpy().copy() for l in LAYERS}


def _generate(tmp: Path) -> None:
    tok = tiny_tokenizer()
    arrays: Dict[str, np.ndarray] = {}
    model = tiny_llama(tok)
    arrays["model_digest"] = np.array(state_digest(model))
    arrays.update(init_arrays(model))
    hp = _hparams("ZeroUnlearn", tmp)
    moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
    targets = neutral_targets(model, tok, forget_requests(), hp)
    for l in LAYERS:
        arrays[f"mom2_{l}"] = moments[l].mom2.numpy()
        arrays[f"count_{l}"] = np.array(moments[l].count)
    arrays.update(z=targets.z.numpy(), h0=targets.h0.numpy(), nll=targets.nll.numpy())
    for name in METHODS:
        weights = _edited(pinned_tiny_llama(arrays), name, _hparams(name, tmp), moments, targets)
        arrays.update({f"{name}_{l}": w for l, w in weights.items()})
    PIN.parent.mkdir(parents=True, exist_ok=True)
    np.savez(PIN, **arrays)


@pytest.mark.parametrize("name", list(METHODS))
def test_paper_settings_give_the_pinned_edit(name, tmp_path):
    with np.load(PIN, allow_pickle=False) as pin:
        stored = {k: pin[k] for k in pin.files}
    model = pinned_tiny_llama(stored)  # raises when torch's own initialisation moved
    assert state_digest(model) == str(stored["model_digest"]), "the stored initial weights are not the pinned ones"
    moments = {l: SecondMoment(torch.from_numpy(stored[f"mom2_{l}"]), int(stored[f"count_{l}"])) for l in LAYERS}
    targets = NeutralTargets(
        z=torch.from_numpy(stored["z"]), h0=torch.from_numpy(stored["h0"]), nll=torch.from_numpy(stored["nll"]),
        steps_run=[0] * len(stored["z"]),
    )
    weights = _edited(model, name, _hparams(name, tmp_path), moments, targets)
    for l in LAYERS:
        expected = stored[f"{name}_{l}"].astype(np.float64)
        original = stored[f"init__model.layers.{l}.mlp.down_proj.weight"].astype(np.float64)
        pinned_edit = expected - original
        assert np.linalg.norm(pinned_edit) > 1e-2 * np.linalg.norm(original)
        rel = np.linalg.norm((weights[l] - original) - pinned_edit) / np.linalg.norm(pinned_edit)
        assert rel < 1e-4, f"{name} layer {l}: the edit moved by {rel:.3e} (relative) from the pinned paper edit"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _generate(Path(tmp))
    print(f"wrote {PIN}")
