"""Every shipped ZeroUnlearn / ZeroUnlearn-GD YAML keeps giving the same edited weights.

``tests/fixtures/yaml_pins.npz`` holds, for each file under ``hparams/ZeroUnlearn/`` and
``hparams/ZeroUnlearn-GD/`` (paper, ``-retain*``, ``-suppress`` and ``-deep`` files of every model), the
``down_proj`` weights ``[d_out, d_in]`` that the file's settings write into one tiny seeded Llama
(:data:`TINY_LAYERS` layers, hidden size 32), with everything that is model-specific mapped onto
that model:

* ``layers`` ``[l_1 .. l_L]`` -> ``[l_i - l_1 + 1]`` (same gaps, starting at tiny layer 1);
  ``v_loss_layer`` (the big model's last layer in every shipped file) -> the tiny model's last
  layer; the module templates -> the tiny Llama's (GPT-2 files included);
* ``model_name``/``device``/``stats_dir``/``mom2_dataset`` -> the tiny model on the CPU and the
  fixed tiny corpus of ``tests/tiny_models.py``;
* a file whose retain-set weights are not all 0 gets the fixed :data:`RETAIN` set.

Every other key (solver weights, thresholds, context templates, target optimiser and objective,
statistics sample size / length) is the file's own, and the whole edit runs: statistics, context
templates, target optimisation, keys, solve, write-back, on the CPU. So the pin covers the target
loop, unlike ``test_paper_pin.py`` (which feeds stored ``C0`` and targets back).

The tiny model and ``C0`` are float64 (``mom2_dtype`` is the one key set for the pin): in float32 the
edit depends on the CPU's kernels through the target loop's 25 Adam steps, early stop and clamp (the
same code gave edits 1.4e-4 (GPT-2 files) to 1.4e-2 (``-suppress``) of the edit apart on an Intel Xeon
and on the AMD EPYC where float32 pins were first written), more than any tolerance that still sees a
changed edit; in float64 they agree to far below :data:`REL_TOL`.

The check: ``||W' - W'_pin|| / ||W'_pin|| < 1e-6`` per edited layer, and the pinned edit ``W'_pin - W`` is
at least 10x that tolerance (so a lost edit fails). Pinned with 1 and with 2 torch threads (identical within the
tolerance).

A file without a pin fails. Regenerate on purpose only (a change of the maths or of a YAML):
``OMP_NUM_THREADS=1 PYTHONPATH=. python tests/methods/test_yaml_pins.py`` (all files) or
``... python tests/methods/test_yaml_pins.py ZeroUnlearn-GD/SmolLM2-135M-Instruct-suppress`` (some files,
the others kept).
"""
from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import FIXTURES, LLAMA_TEMPLATES, REPO_ROOT, forget_requests, tiny_llama, tiny_tokenizer, write_corpus  # noqa: E402  # noqa: E402
from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams  # noqa: E402
from zerounlearn_editor.methods.zerounlearn.method import apply_zerounlearn_to_model  # noqa: E402
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model  # noqa: E402

ROOT = REPO_ROOT / "hparams"
PIN = FIXTURES / "yaml_pins.npz"
TINY_LAYERS = 9
REL_TOL = 1e-6
PIN_DTYPE = torch.float64  # the CPU's float32 kernels differ between machines (see the module docstring)
METHODS = {
    "ZeroUnlearn": (ZeroUnlearnHyperParams, apply_zerounlearn_to_model),
    "ZeroUnlearn-GD": (ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model),
}
YAMLS = sorted(f"{m}/{p.stem}" for m in METHODS for p in (ROOT / m).glob("*.yaml"))
RETAIN = [
    {"prompt": "the capital of italy is", "subject": "italy"},
    {"prompt": "the capital of spain is", "subject": "spain"},
    {"prompt": "the capital of egypt is", "subject": "egypt"},
    {"prompt": "many people live in london and it was known for its river", "subject": "london"},
]


def tiny_layers(layers: List[int]) -> List[int]:
    """The YAML's ``layers`` moved onto the tiny model: same gaps, first one at tiny layer 1."""
    mapped = [l - layers[0] + 1 for l in layers]
    if mapped[-1] >= TINY_LAYERS - 1:
        raise ValueError(f"layers {layers} span more than the tiny model's {TINY_LAYERS - 2} editable layers")
    return mapped


def tiny_config(name: str, stats_dir: Path, corpus: Path) -> Dict[str, Any]:
    """The YAML ``hparams/{name}.yaml`` with its model-specific keys mapped onto the tiny Llama."""
    config = yaml.safe_load((ROOT / f"{name}.yaml").read_text(encoding="utf-8"))
    config.update(LLAMA_TEMPLATES)
    config.update(
        model_name="tiny", device="cpu", stats_dir=str(stats_dir), mom2_dataset=str(corpus),
        layers=tiny_layers(list(config["layers"])),
        v_loss_layer=-1 if config.get("v_loss_layer", -1) == -1 else TINY_LAYERS - 1,
        mom2_dtype="float64",
    )
    return config


def _digest(model) -> str:
    h = hashlib.sha256()
    for key, p in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _key(name: str, layer: int) -> str:
    return f"{name.replace('/', '__')}__L{layer}"


def edited_weights(name: str, tmp: Path) -> Tuple[Dict[int, np.ndarray], Dict[int, np.ndarray]]:
    """``({tiny layer: W [d_out, d_in]} before, {tiny layer: W' [d_out, d_in]} after)`` of one YAML's edit."""
    method = name.split("/")[0]
    cls, apply = METHODS[method]
    tmp.mkdir(parents=True, exist_ok=True)
    hp = cls.from_dict(tiny_config(name, tmp / "stats", write_corpus(tmp / "corpus.jsonl")), source=name)
    tok = tiny_tokenizer()
    model = tiny_llama(tok, layers=TINY_LAYERS).to(PIN_DTYPE)
    before = {l: model.model.layers[l].mlp.down_proj.weight.detach().numpy().copy() for l in hp.layers}
    extra = {"retain": RETAIN} if any(v > 0 for v in hp.retain_weights().values()) else {}
    apply(model, tok, forget_requests(), hp, progress=False, **extra)
    after = {l: model.model.layers[l].mlp.down_proj.weight.detach().numpy().copy() for l in hp.layers}
    return before, after


def test_every_shipped_yaml_is_covered():
    assert len(YAMLS) >= 18, YAMLS  # 23 until ZeroUnlearn+R's five -retain files were retired
    assert {"ZeroUnlearn-GD/SmolLM2-135M-Instruct-suppress", "ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain-many",
            "ZeroUnlearn-GD/gpt2-xl-retain", "ZeroUnlearn/gpt2-xl", "ZeroUnlearn-GD/Qwen3-4B"} <= set(YAMLS)


def test_tiny_model_is_the_pinned_one():
    with np.load(PIN, allow_pickle=False) as pin:
        stored = str(pin["model_digest"])
    assert _digest(tiny_llama(tiny_tokenizer(), layers=TINY_LAYERS)) == stored, (
        "the tiny model's initial weights changed"
    )


@pytest.mark.parametrize("name", YAMLS)
def test_shipped_yaml_gives_the_pinned_edit(name, tmp_path):
    with np.load(PIN, allow_pickle=False) as pin:
        stored = {k: pin[k] for k in pin.files}
    before, after = edited_weights(name, tmp_path)
    missing = [_key(name, l) for l in after if _key(name, l) not in stored]
    assert not missing, (
        f"no pin for {name} ({missing}); regenerate on purpose: python tests/methods/test_yaml_pins.py {name}"
    )
    assert not any(k.startswith(name.replace("/", "__") + "__L") and int(k.rsplit("L", 1)[1]) not in after
                   for k in stored), f"{name} edits other layers than pinned"
    for l, w in after.items():
        expected = stored[_key(name, l)].astype(np.float64)
        pinned_edit = expected - before[l].astype(np.float64)
        # the pin must be an edit the tolerance can see: at least 10x REL_TOL of the weight
        assert np.linalg.norm(pinned_edit) > 10 * REL_TOL * np.linalg.norm(expected), (
            f"{name} layer {l}: pinned edit is empty"
        )
        rel = np.linalg.norm(w.astype(np.float64) - expected) / np.linalg.norm(expected)
        assert rel < REL_TOL, (f"{name} tiny layer {l}: the edited weight moved by {rel:.3e} (relative) from its pin "
                               f"({np.linalg.norm(w - expected) / np.linalg.norm(pinned_edit):.3e} of the pinned edit)")


def generate(names: List[str]) -> None:
    """Write the pins of ``names`` (YAML names ``method/stem``) into :data:`PIN`, keeping the others'."""
    arrays: Dict[str, np.ndarray] = {}
    if PIN.exists():
        with np.load(PIN, allow_pickle=False) as pin:
            arrays = {k: pin[k] for k in pin.files}
    arrays = {k: v for k, v in arrays.items() if not any(k.startswith(n.replace("/", "__") + "__L") for n in names)}
    arrays["model_digest"] = np.array(_digest(tiny_llama(tiny_tokenizer(), layers=TINY_LAYERS)))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            _, after = edited_weights(name, Path(tmp) / name.replace("/", "__"))
            arrays.update({_key(name, l): w for l, w in after.items()})
            print(f"pinned {name}: tiny layers {sorted(after)}")
    PIN.parent.mkdir(parents=True, exist_ok=True)
    tmp_file = PIN.with_name(PIN.stem + ".tmp.npz")
    np.savez(tmp_file, **arrays)
    tmp_file.replace(PIN)


if __name__ == "__main__":
    requested = sys.argv[1:] or YAMLS
    unknown = sorted(set(requested) - set(YAMLS))
    if unknown:
        sys.exit(f"unknown YAML name(s) {unknown}; known: {YAMLS}")
    generate(list(requested))
    print(f"wrote {PIN}")
