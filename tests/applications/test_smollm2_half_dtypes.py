"""``zerounlearn unlearn --dtype`` on SmolLM2 (slow, two facts, perplexity off): in bfloat16 every layer's MLP
output is found to reach the residual stream as is, and ``-many.yaml`` (layers 12-18) edits from the base model and
continues from its own saved folder (issue 46 item 9); a float16 load of the base or of a saved folder is the same
model as the float32 one (its ``C0`` cache is reused, not overwritten; the ledger's base model matches: item 10)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from zerounlearn_editor.applications.ledger import LEDGER_NAME
from zerounlearn_editor.cli import main
from zerounlearn_editor.engine.stats import load_second_moment
from zerounlearn_editor.engine.stats.eigen_cache import EIGH_FOLDER
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow

FACTS_A = [{"prompt": "The capital of France is", "subject": "France", "answer": "Paris"},
           {"prompt": "The capital of Germany is", "subject": "Germany", "answer": "Berlin"}]
FACTS_B = [{"prompt": "The capital of Japan is", "subject": "Japan", "answer": "Tokyo"},
           {"prompt": "The capital of Italy is", "subject": "Italy", "answer": "Rome"}]


def _job(smollm2_path, smollm2_stats_dir, tmp_path, variant: str = "", **overrides):
    """A shipped YAML on SmolLM2 (with ``overrides``) and a copy of the shared ``C0`` cache and of its
    eigendecompositions (this test may not touch the shared ones; an entry read saves a few seconds of ``eigh`` per
    layer), and the two facts files."""
    config = yaml.safe_load(Path(hparams_path("ZeroUnlearn-GD", f"SmolLM2-135M-Instruct{variant}")).read_text())
    stats = tmp_path / "stats"
    for folder in ("SmolLM2-135M-Instruct", EIGH_FOLDER):
        if (smollm2_stats_dir / folder).is_dir():
            # another process may be renaming a ``.tmp`` into place there: copy finished files only
            shutil.copytree(smollm2_stats_dir / folder, stats / folder, ignore=shutil.ignore_patterns("*.tmp"))
    # the fluency guard (a read-only check of the edit, not the method) is off: the test is about the dtype
    config.update(stats_dir=str(stats), model_name=str(smollm2_path), fluency_max_increase=None, **overrides)
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    for name, facts in (("a.json", FACTS_A), ("b.json", FACTS_B)):
        (tmp_path / name).write_text(json.dumps(facts), encoding="utf-8")
    return tmp_path


@pytest.fixture
def job(smollm2_path, smollm2_stats_dir, tmp_path):
    """The paper's YAML (layers 16-18) with 3 target steps, not 25: the test asserts on the ``C0`` cache and the
    loaded model, which the target optimisation does not touch (the forgetting is asserted in bfloat16 below)."""
    return _job(smollm2_path, smollm2_stats_dir, tmp_path, v_num_grad_steps=3)


@pytest.fixture
def job_many(smollm2_path, smollm2_stats_dir, tmp_path):
    """``-many.yaml``: layers 12-18; in bfloat16 layer 15's residual stream is far larger than its MLP output."""
    return _job(smollm2_path, smollm2_stats_dir, tmp_path, "-many")


def _unlearn(root: Path, facts: str, out: Path, *extra: str) -> int:
    return main(["unlearn", "--hparams", str(root / "paper.yaml"), "--facts", str(root / facts), "--out", str(out),
                 "--save", "model", "--ppl-tokens", "0", "--no-progress", *extra])


def _stats_files(root: Path):
    return {p: p.stat().st_mtime_ns for p in sorted((root / "stats").rglob("*.npz"))}


def test_bfloat16_edits_from_the_base_and_from_a_saved_folder(job_many):
    job = job_many
    first, second = job / "first", job / "second"
    assert _unlearn(job, "a.json", first, "--dtype", "bfloat16") == 0
    assert _unlearn(job, "b.json", second, "--dtype", "bfloat16", "--model", str(first)) == 0
    report = json.loads((first / "unlearn_report.json").read_text(encoding="utf-8"))
    assert [r["acc_before"] for r in report["forgotten"]] == [1.0, 1.0], report
    assert all(r["prob_after"] < 0.5 * r["prob_before"] for r in report["forgotten"]), report
    ledger = json.loads((second / LEDGER_NAME).read_text(encoding="utf-8"))
    assert [f["prompt"] for f in ledger["facts"]] == [f["prompt"] for f in FACTS_A + FACTS_B]
    assert ledger["weights_dtype"] == "torch.bfloat16"


def test_float16_load_is_the_same_model_as_float32(job, caplog):
    first = job / "first"
    assert _unlearn(job, "a.json", first) == 0  # float32: computes C0 when the shared cache had none
    made = _stats_files(job)
    # each file records a sample of the weights (added to a file written before samples were recorded)
    read = [p for p in made if any(f"layers.{layer}.mlp" in p.name for layer in (16, 17, 18))]  # the YAML's
    assert len(read) == 3 and all("model_sample" in load_second_moment(p)[1] for p in read)
    caplog.clear()
    assert _unlearn(job, "b.json", job / "half-base", "--dtype", "float16", "--save", "none") == 0
    assert "another model with the same folder name" not in caplog.text
    assert _stats_files(job) == made  # the float32 C0 cache is reused, not overwritten
    assert _unlearn(job, "b.json", job / "half-continued", "--dtype", "float16", "--model", str(first)) == 0
    assert _stats_files(job) == made


def test_bfloat16_residual_path_of_every_layer(smollm2_path):
    """Probed alone in bfloat16, layers 3, 6, 15 and 25's MLP output drowned in the rounding of their much larger
    residual stream (relative error 0.11-0.23 against the 0.1 allowed), and the edit was refused as 'does not reach
    the residual stream'; every layer's output is added as is."""
    import torch

    from zerounlearn_editor.engine.post_mlp import detect_post_mlp_maps
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(str(smollm2_path), dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    for layer in range(model.config.num_hidden_layers):
        spec = detect_post_mlp_maps(model, "model.layers.{}", "model.layers.{}.mlp.down_proj", [layer])[layer]
        assert spec.is_identity, (layer, spec.describe())
