"""Every shipped ZeroUnlearn / ZeroUnlearn-GD YAML keeps giving the same edit: statistics, targets and solve.

``tests/fixtures/yaml_pins.npz`` holds, for each file under ``hparams/ZeroUnlearn/`` and
``hparams/ZeroUnlearn-GD/`` (paper, ``-retain*``, ``-suppress``, ``-deep``, ``-many`` and ``-robust`` files of
every model), what
the file's settings give on one tiny seeded Llama (:data:`TINY_LAYERS` layers, hidden size 32, float64), with
everything that is model-specific mapped onto that model:

* ``layers`` ``[l_1 .. l_L]`` -> ``[l_i - l_1 + 1]`` (same gaps, starting at tiny layer 1; a contiguous span longer
  than the tiny model's editable layers keeps its last ones);
  ``v_loss_layer`` (the big model's last layer in every shipped file) -> the tiny model's last
  layer; the module templates -> the tiny Llama's (GPT-2 files included);
* ``model_name``/``device``/``stats_dir``/``mom2_dataset`` -> the tiny model on the CPU and the
  fixed tiny corpus of ``tests/tiny_models.py``;
* a file whose retain-set weights are not all 0 gets the fixed :data:`RETAIN` set;
* ``suppress_rank_limit`` ``R`` -> :data:`TINY_RANK_LIMIT` (the pinned requests' answers are not the tiny model's
  argmax, so ``R`` = 0 would hold all of them back and pin an empty edit; the rank read still runs, and the
  selection itself is tested in ``tests/engine/test_step_rank_limit.py``);
* ``repair_rounds`` -> 0: a round reads its own targets inside the edit (the machine-dependent part, below), and
  the rounds are tested in ``tests/methods/test_gd_repair.py``; the shipped value is asserted in
  ``tests/methods/test_retain_yamls.py``.

Every other key (solver weights, thresholds, context templates, target optimiser and objective,
statistics sample size / length) is the file's own. The pin holds, per file: ``C0`` of each edited layer
(shared arrays, by content), the neutral targets (``z``, ``h0``, ``nll`` ``[n]``, steps run) and the edited
``down_proj`` weights ``W'`` ``[d_out, d_in]`` that the stored ``C0`` and targets give; and once, the tiny
model's initial weights (:func:`tiny_models.pinned_tiny_llama`: torch's seeded initialisation differs by an
ulp between CPU kernels).

What the edit computes splits in two (issue 36.8):

* **deterministic**: keys, solve and write-back from the stored ``C0`` and targets, and ``C0`` itself (float64
  sums over a fixed corpus). These agree across kernels (``ATEN_CPU_CAPABILITY=default``/``avx2``/``avx512``)
  and thread counts to 2.4e-14 of the edit and 4.5e-17 of ``C0`` (measured), and are pinned at
  :data:`SOLVE_TOL` / :data:`C0_TOL`;
* **machine-dependent**: the targets. Their Adam loop runs in float32 (``delta``, ``h0`` and the logits are
  float32 whatever the model's dtype), and 25-50 steps of a loop that does not settle on the tiny model carry
  the kernels' rounding into the result: the same code gave ``z`` 2% of the residual apart between ``avx2`` and
  ``avx512`` (``-suppress``), and the whole edit 5.7e-5 apart on an AMD EPYC. They are checked against their
  stopping rule: every request takes the pinned number of steps (the rule's decisions; one more or less only
  where the pinned loss is within :data:`NLL_TOL_OF_STOP` x ``v_early_stop_loss`` of the stop value), its final
  loss is within :data:`NLL_TOL_OF_STOP` x ``v_early_stop_loss`` of the pinned one (the rule resolves the loss
  to the stop value; this is a hundredth of it, 33x the largest drift measured, 3e-4 of it), ``h0`` within
  1e-6, and ``z`` within :data:`Z_TOL` of the pinned residual ``|z_pin - h0|``.

A changed solve, key or write-back fails the first part at once; a changed target objective, optimiser
or setting moves the loss or the residual by more than these tolerances. A file without a pin fails.
Regenerate on purpose only (a change of the maths or of a YAML):
``OMP_NUM_THREADS=1 PYTHONPATH=. python tests/methods/test_yaml_pins.py`` (all files) or
``... python tests/methods/test_yaml_pins.py ZeroUnlearn-GD/SmolLM2-135M-Instruct-suppress`` (some files,
the others kept).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import (  # noqa: E402
    FIXTURES,
    INIT_PREFIX,
    LLAMA_TEMPLATES,
    REPO_ROOT,
    forget_requests,
    init_arrays,
    pinned_tiny_llama,
    state_digest,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor.engine.pipeline import batched_statistics, neutral_targets, target_settings  # noqa: E402
from zerounlearn_editor.engine.stats import SecondMoment, StatsRequest  # noqa: E402
from zerounlearn_editor.engine.targets import NeutralTargets  # noqa: E402
from zerounlearn_editor.methods.registry import registered_methods  # noqa: E402

ROOT = REPO_ROOT / "hparams"
PIN = FIXTURES / "yaml_pins.npz"
TINY_LAYERS = 9
SOLVE_TOL = 1e-9
"""``||W' - W'_pin|| / ||W'_pin - W||`` allowed for the solve on the stored ``C0`` and targets (of the edit)."""
C0_TOL = 1e-10
"""``||C0 - C0_pin|| / ||C0_pin||`` allowed for the statistics (float64 sums; summation order only)."""
NLL_TOL_OF_STOP = 0.01
"""The final target loss may differ from the pinned one by this fraction of ``v_early_stop_loss``."""
Z_TOL = {"neutral": 1e-3, "suppress_answer": 0.2}
"""``|z - z_pin| / |z_pin - h0|`` allowed per request, by ``target_objective``: float32 rounding carried through the
Adam loop. Measured across kernels and threads (``default``/``avx2``/``avx512``, 1 and 2 threads) at most 9.3e-5
(neutral) and 2.2e-2 (``suppress_answer``, whose loop on the tiny model amplifies rounding); a 10% change of one
target setting moves ``z`` by 4.6e-2 (``kl_factor``) to 1.7 (neutral) and by more than 1.1 (suppress_answer)."""
PIN_DTYPE = torch.float64
METHODS = {entry.folder: (entry.hparams_class, entry.apply) for entry in registered_methods()}
"""Every editing method of the registry (YAML folder -> hyperparameter class, apply function): a registered method's
shipped YAMLs need pins like these."""
YAMLS = sorted(f"{m}/{p.stem}" for m in METHODS for p in (ROOT / m).glob("*.yaml"))
RETAIN = [
    {"prompt": "the capital of italy is", "subject": "italy"},
    {"prompt": "the capital of spain is", "subject": "spain"},
    {"prompt": "the capital of egypt is", "subject": "egypt"},
    {"prompt": "many people live in london and it was known for its river", "subject": "london"},
]


TINY_RANK_LIMIT = 10_000
"""A file's ``suppress_rank_limit`` on the tiny model: above its vocabulary, so no pinned request is held back."""


def tiny_layers(layers: List[int]) -> List[int]:
    """The YAML's ``layers`` moved onto the tiny model: same gaps, first one at tiny layer 1. A contiguous span longer
    than the tiny model's editable layers (the derived ``-many`` files of deep models: 8 layers of Qwen3-4B, 11 of
    gpt2-xl) keeps its last :data:`TINY_LAYERS` - 2 layers."""
    if len(layers) > TINY_LAYERS - 2 and layers == list(range(layers[0], layers[-1] + 1)):
        layers = layers[-(TINY_LAYERS - 2):]
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
    if config.get("suppress_rank_limit") is not None:  # every pinned request steps (see the module docstring)
        config["suppress_rank_limit"] = TINY_RANK_LIMIT
    if config.get("repair_rounds"):  # the pin is of the one edit (see the module docstring)
        config["repair_rounds"] = 0
    return config


def _key(name: str) -> str:
    return name.replace("/", "__")


def _load_pin() -> Dict[str, np.ndarray]:
    with np.load(PIN, allow_pickle=False) as pin:
        return {k: pin[k] for k in pin.files}


class Edit:
    """One YAML's edit on the pinned tiny model: its hparams, the model (float64) and the retain argument."""

    def __init__(self, name: str, tmp: Path, pin: Dict[str, np.ndarray]):
        method = name.split("/")[0]
        cls, self.apply = METHODS[method]
        tmp.mkdir(parents=True, exist_ok=True)
        self.hp = cls.from_dict(tiny_config(name, tmp / "stats", write_corpus(tmp / "corpus.jsonl")), source=name)
        self.tok = tiny_tokenizer()
        self.model = pinned_tiny_llama(pin, TINY_LAYERS).to(PIN_DTYPE)
        self.extra = {"retain": RETAIN} if any(v > 0 for v in self.hp.retain_weights().values()) else {}

    def weights(self) -> Dict[int, np.ndarray]:
        """``{tiny layer: down_proj weight [d_out, d_in]}`` of the edited layers, float64."""
        return {l: self.model.model.layers[l].mlp.down_proj.weight.detach().numpy().astype(np.float64).copy()
                for l in self.hp.layers}

    def statistics(self) -> Dict[int, SecondMoment]:
        return batched_statistics(self.model, self.tok, self.hp, self.hp.mom2_dataset, progress=False)

    def targets(self) -> NeutralTargets:
        return neutral_targets(self.model, self.tok, forget_requests(), self.hp)

    def solve(self, moments: Dict[int, SecondMoment], targets: NeutralTargets) -> Dict[int, np.ndarray]:
        """The edited weights from given ``C0`` and targets (keys, solve, write-back)."""
        self.apply(self.model, self.tok, forget_requests(), self.hp, progress=False, second_moments=moments,
                   targets=targets, **self.extra)
        return self.weights()


def stored_inputs(
    pin: Dict[str, np.ndarray], name: str, layers: List[int]
) -> Tuple[Dict[int, SecondMoment], NeutralTargets]:
    """The pinned ``C0`` per layer and neutral targets of ``name``."""
    key = _key(name)
    moments = {}
    for l in layers:
        ref = str(pin[f"{key}__C{l}"])
        moments[l] = SecondMoment(torch.from_numpy(pin[ref].copy()), int(pin[ref + "__count"]))
    targets = NeutralTargets(z=torch.from_numpy(pin[f"{key}__z"].copy()), h0=torch.from_numpy(pin[f"{key}__h0"].copy()),
                             nll=torch.from_numpy(pin[f"{key}__nll"].copy()), steps_run=pin[f"{key}__steps"].tolist())
    return moments, targets


def test_every_shipped_yaml_is_covered():
    assert len(YAMLS) >= 18, YAMLS  # 23 until ZeroUnlearn+R's five -retain files were retired
    assert {"ZeroUnlearn-GD/SmolLM2-135M-Instruct-suppress", "ZeroUnlearn-GD/SmolLM2-135M-Instruct-retain-many",
            "ZeroUnlearn-GD/gpt2-xl-retain", "ZeroUnlearn/gpt2-xl", "ZeroUnlearn-GD/Qwen3-4B"} <= set(YAMLS)


def test_tiny_model_is_the_pinned_one():
    pin = _load_pin()
    model = pinned_tiny_llama(pin, TINY_LAYERS)  # raises when torch's own initialisation moved
    assert state_digest(model) == str(pin["model_digest"]), "the stored initial weights are not the pinned ones"


@pytest.mark.parametrize("name", YAMLS)
def test_shipped_yaml_solve_on_stored_statistics_and_targets(name, tmp_path):
    """Deterministic part: keys, solve and write-back from the pinned ``C0`` and targets."""
    pin = _load_pin()
    edit = Edit(name, tmp_path, pin)
    key = _key(name)
    missing = [f"{key}__L{l}" for l in edit.hp.layers if f"{key}__L{l}" not in pin]
    assert not missing, (
        f"no pin for {name} ({missing}); regenerate on purpose: python tests/methods/test_yaml_pins.py {name}"
    )
    assert not any(k.startswith(key + "__L") and int(k.rsplit("L", 1)[1]) not in edit.hp.layers for k in pin), \
        f"{name} edits other layers than pinned"
    before = edit.weights()
    after = edit.solve(*stored_inputs(pin, name, edit.hp.layers))
    for l, w in after.items():
        expected = pin[f"{key}__L{l}"]
        pinned_edit = expected - before[l]
        # the pin must be an edit: at least 1e-6 of the weight
        assert np.linalg.norm(pinned_edit) > 1e-6 * np.linalg.norm(expected), f"{name} layer {l}: pinned edit is empty"
        rel = np.linalg.norm(w - expected) / np.linalg.norm(pinned_edit)
        assert rel < SOLVE_TOL, (
            f"{name} tiny layer {l}: the solve on the stored C0 and targets moved by {rel:.3e} of the pinned edit"
        )


class ComputedOnce:
    """``C0`` and neutral targets computed once per distinct setting for this module's YAMLs.

    The 28 shipped YAMLs mapped onto the tiny model ask for 4 distinct statistics and 10 distinct sets of targets
    (equal ``mom2_*`` keys, layers and module; equal :func:`~zerounlearn_editor.engine.pipeline.target_settings`), on
    the same pinned model, corpus and requests. Each YAML's pins are still checked against what its settings give:
    a key that left out a setting the result depends on would hand a YAML another YAML's result, which fails its
    own pin (the pins were generated one YAML at a time), so sharing cannot turn a failure into a pass."""

    def __init__(self) -> None:
        self._moments: Dict[str, Dict[int, SecondMoment]] = {}
        self._targets: Dict[str, NeutralTargets] = {}

    def statistics(self, edit: "Edit") -> Dict[int, SecondMoment]:
        request = StatsRequest.of_hparams(edit.hp, edit.hp.mom2_dataset, progress=False)
        # the folder and the corpus path differ per test, not what they hold (write_corpus: the same CORPUS)
        key = repr(dataclasses.replace(request, stats_dir="", corpus=""))
        if key not in self._moments:
            self._moments[key] = edit.statistics()
        return self._moments[key]

    def targets(self, edit: "Edit") -> NeutralTargets:
        key = json.dumps(target_settings(edit.model, edit.hp), sort_keys=True, default=str)
        if key not in self._targets:
            self._targets[key] = edit.targets()
        return self._targets[key]


@pytest.fixture(scope="module")
def computed() -> ComputedOnce:
    return ComputedOnce()


@pytest.mark.parametrize("name", YAMLS)
def test_shipped_yaml_statistics_and_targets_meet_their_pins(name, tmp_path, computed):
    """Machine-dependent part: ``C0`` (tight) and the targets, within what their stopping rule fixes."""
    pin = _load_pin()
    edit = Edit(name, tmp_path, pin)
    moments, stored = stored_inputs(pin, name, edit.hp.layers)
    for l, moment in computed.statistics(edit).items():
        rel = float((moment.mom2 - moments[l].mom2).norm() / moments[l].mom2.norm())
        assert moment.count == moments[l].count and rel < C0_TOL, f"{name} layer {l}: C0 moved by {rel:.3e}"
    problems = target_mismatches(edit.hp, computed.targets(edit), stored)
    assert not problems, f"{name}: " + "; ".join(problems)


def target_mismatches(hp, targets: NeutralTargets, stored: NeutralTargets) -> List[str]:
    """What in ``targets`` breaks the pinned ``stored`` ones' stopping rule (see the module docstring); empty: none."""
    stop, max_steps = hp.v_early_stop_loss, hp.v_num_grad_steps
    nll_tol = NLL_TOL_OF_STOP * stop
    problems = []
    for i in range(len(stored.steps_run)):
        steps, pinned_steps = targets.steps_run[i], stored.steps_run[i]
        nll, pinned_nll = float(targets.nll[i]), float(stored.nll[i])
        near_stop = abs(pinned_nll - stop) <= nll_tol
        if not (steps == pinned_steps or (near_stop and abs(steps - pinned_steps) == 1)):
            problems.append(
                f"request {i}: {steps} target steps, pinned {pinned_steps} (of {max_steps}; stop at {stop})"
            )
        if steps < max_steps and not nll < stop:
            problems.append(f"request {i}: stopped after {steps} steps at loss {nll} >= {stop}")
        if not abs(nll - pinned_nll) <= nll_tol:
            problems.append(
                f"request {i}: final target loss {nll:.6f}, pinned {pinned_nll:.6f} (allowed +-{nll_tol:g})"
            )
        if float((targets.h0[i] - stored.h0[i]).norm() / stored.h0[i].norm()) > 1e-6:
            problems.append(f"request {i}: h0 moved")
        if steps == pinned_steps:
            moved = float((targets.z[i] - stored.z[i]).norm() / (stored.z[i] - stored.h0[i]).norm())
            if not moved < Z_TOL[hp.target_objective]:
                problems.append(f"request {i}: target z moved by {moved:.3e} of its residual "
                                f"(allowed {Z_TOL[hp.target_objective]})")
    return problems


SENSITIVITY = "ZeroUnlearn-GD/SmolLM2-135M-Instruct"


@pytest.mark.parametrize("name", [SENSITIVITY, SENSITIVITY + "-suppress"])
@pytest.mark.parametrize("change", [dict(v_weight_decay=0.45), dict(kl_factor=0.056), dict(v_lr=0.45),
                                    dict(clamp_norm_factor=0.7), dict(v_num_grad_steps=24)])
def test_the_target_check_sees_a_changed_target_setting(name, change, tmp_path):
    """A 10% change of one target setting (a change of the targets' maths) fails the machine-tolerant check."""
    pin = _load_pin()
    edit = Edit(name, tmp_path, pin)
    _, stored = stored_inputs(pin, name, edit.hp.layers)
    edit.hp = edit.hp.replace(**change)
    assert target_mismatches(edit.hp, edit.targets(), stored), f"{change} went unnoticed"


def test_the_solve_check_sees_a_small_change_of_the_targets(tmp_path):
    """Targets moved by 1e-6 of the residual move the solve by more than SOLVE_TOL: the deterministic pin is tight."""
    pin = _load_pin()
    edit = Edit(SENSITIVITY, tmp_path, pin)
    moments, stored = stored_inputs(pin, SENSITIVITY, edit.hp.layers)
    before = edit.weights()
    nudged = NeutralTargets(z=stored.h0 + (stored.z - stored.h0) * (1 + 1e-6), h0=stored.h0, nll=stored.nll,
                            steps_run=stored.steps_run)
    after = edit.solve(moments, nudged)
    key = _key(SENSITIVITY)
    rel = max(np.linalg.norm(after[l] - pin[f"{key}__L{l}"]) / np.linalg.norm(pin[f"{key}__L{l}"] - before[l])
              for l in after)
    assert rel > SOLVE_TOL, rel


def generate(names: List[str]) -> None:
    """Write the pins of ``names`` (YAML names ``method/stem``) into :data:`PIN`, keeping the others'.

    The initial weights are taken from the existing pin when it has them (else from torch, here)."""
    arrays: Dict[str, np.ndarray] = _load_pin() if PIN.exists() else {}
    arrays = {k: v for k, v in arrays.items() if not any(k.startswith(_key(n) + "__") for n in names)}
    if not any(k.startswith(INIT_PREFIX) for k in arrays):
        arrays.update(init_arrays(tiny_llama(tiny_tokenizer(), layers=TINY_LAYERS)))
    arrays["model_digest"] = np.array(state_digest(pinned_tiny_llama(arrays, TINY_LAYERS)))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            edit = Edit(name, Path(tmp) / _key(name), arrays)
            moments, targets = edit.statistics(), edit.targets()
            for l, moment in moments.items():
                c0 = moment.mom2.numpy().astype(np.float64)
                ref = "C0__" + hashlib.sha256(c0.tobytes() + str(moment.count).encode()).hexdigest()[:16]
                arrays[ref], arrays[ref + "__count"] = c0, np.array(moment.count)
                arrays[f"{_key(name)}__C{l}"] = np.array(ref)
            arrays.update({f"{_key(name)}__z": targets.z.numpy(), f"{_key(name)}__h0": targets.h0.numpy(),
                           f"{_key(name)}__nll": targets.nll.numpy(),
                           f"{_key(name)}__steps": np.array(targets.steps_run, dtype=np.int64)})
            after = edit.solve(*stored_inputs(arrays, name, edit.hp.layers))
            arrays.update({f"{_key(name)}__L{l}": w for l, w in after.items()})
            print(f"pinned {name}: tiny layers {sorted(after)}, target steps {targets.steps_run}")
    used = {str(v) for k, v in arrays.items() if "__C" in k and not k.startswith("C0__")}
    arrays = {k: v for k, v in arrays.items() if not k.startswith("C0__") or k.split("__count")[0] in used}
    PIN.parent.mkdir(parents=True, exist_ok=True)
    tmp_file = PIN.with_name(PIN.stem + ".tmp.npz")
    np.savez_compressed(tmp_file, **arrays)
    tmp_file.replace(PIN)


if __name__ == "__main__":
    requested = sys.argv[1:] or YAMLS
    unknown = sorted(set(requested) - set(YAMLS))
    if unknown:
        sys.exit(f"unknown YAML name(s) {unknown}; known: {YAMLS}")
    generate(list(requested))
    print(f"wrote {PIN}")
