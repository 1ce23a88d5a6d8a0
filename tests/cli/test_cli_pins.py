"""``zerounlearn unlearn`` keeps printing the same numbers: its report on a tiny Llama is pinned.

``tests/fixtures/cli_pins.json`` holds, per run below, every field of ``unlearn_report.json`` that the
edit decides (``method``, the forgotten / kept rows: accuracy and probability before and after, the
8-token greedy continuations; the perplexities; the saved mode), not the stage times or file
paths. The runs are the ones ``tests/applications/test_unlearn_cli.py`` covers, on the same tiny model, facts
and perplexity text: ZeroUnlearn, ZeroUnlearn-GD, and ZeroUnlearn-GD with a retain file.
Numbers must agree within 1e-6 relative (1e-9 absolute near 0), text exactly.

Regenerate on purpose only: ``OMP_NUM_THREADS=1 PYTHONPATH=. python tests/cli/test_cli_pins.py``.
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import (  # noqa: E402
    CORPUS,
    FIXTURES,  # noqa: E402
    forget_requests,
    tiny_hparams_dict,
    tiny_llama,
    tiny_tokenizer,
    write_corpus,
)
from zerounlearn_editor.applications.unlearn import REPORT_NAME  # noqa: E402
from zerounlearn_editor.cli import main  # noqa: E402

PIN = FIXTURES / "cli_pins.json"
RUNS = {
    "ZeroUnlearn": dict(alg_name="ZeroUnlearn"),
    "ZeroUnlearn-GD": dict(alg_name="ZeroUnlearn-GD"),
    "ZeroUnlearn-GD-retain": dict(alg_name="ZeroUnlearn-GD", retain_nullspace_weight=1.0),
}
PINNED_KEYS = ("method", "forgotten", "kept", "ppl_before", "ppl_after", "ppl_tokens", "saved")
REL_TOL, ABS_TOL = 1e-6, 1e-9


def run_report(name: str, root: Path) -> Dict[str, Any]:
    """Run ``zerounlearn unlearn`` for ``RUNS[name]`` under ``root``; the report's pinned fields."""
    tok = tiny_tokenizer()
    model_dir = root / "tiny-model"
    if not model_dir.exists():
        tiny_llama(tok).save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
    corpus = write_corpus(root / "corpus.jsonl")
    (root / "ppl.txt").write_text(" ".join(CORPUS), encoding="utf-8")
    facts = [{"prompt": r["prompt"], "subject": r["subject"], "answer": r["ground_truth"]} for r in forget_requests()]
    facts[2].pop("answer")  # answers are optional
    (root / "facts.json").write_text(json.dumps(facts), encoding="utf-8")
    config = dict(RUNS[name])
    config = tiny_hparams_dict(root / "stats", corpus, model_name=str(model_dir), **config)
    hparams = root / f"{name}.yaml"
    hparams.write_text(yaml.safe_dump(config), encoding="utf-8")
    extra: List[str] = []
    if "retain" in name:
        retain = root / "keep.yaml"
        retain.write_text("- {prompt: the capital of italy is, subject: italy, answer: rome}\n", encoding="utf-8")
        extra = ["--retain", str(retain)]
    out = root / f"out-{name}"
    code = main(
        [
            "unlearn",
            "--facts",
            str(root / "facts.json"),
            "--ppl-text",
            str(root / "ppl.txt"),
            "--ppl-tokens",
            "60",
            "--no-progress",
            "--hparams",
            str(hparams),
            "--out",
            str(out),
            "--save",
            "none",
            *extra,
        ]
    )
    assert code == 0, f"{name}: zerounlearn unlearn exited with {code}"
    report = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    return {key: report[key] for key in PINNED_KEYS}


def mismatches(got: Any, want: Any, where: str = "") -> List[str]:
    """Paths where ``got`` differs from ``want`` (numbers within the tolerance, everything else exactly)."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{where}: keys {sorted(got) if isinstance(got, dict) else got!r} != {sorted(want)}"]
        return [m for k in want for m in mismatches(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {got!r} != {want!r}"]
        return [m for i, (g, w) in enumerate(zip(got, want)) for m in mismatches(g, w, f"{where}[{i}]")]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        ok = math.isclose(got, want, rel_tol=REL_TOL, abs_tol=ABS_TOL)
        return [] if ok else [f"{where}: {got!r} != pinned {want!r}"]
    return [] if got == want and type(got) is type(want) else [f"{where}: {got!r} != pinned {want!r}"]


def test_mismatches_sees_a_changed_number_and_text():
    want = {"a": [{"p": 0.5, "g": "x y"}], "n": 3}
    assert mismatches({"a": [{"p": 0.5 * (1 + 1e-8), "g": "x y"}], "n": 3}, want) == []
    assert mismatches({"a": [{"p": 0.5001, "g": "x y"}], "n": 3}, want) == [".a[0].p: 0.5001 != pinned 0.5"]
    assert mismatches({"a": [{"p": 0.5, "g": "x z"}], "n": 3}, want) == [".a[0].g: 'x z' != pinned 'x y'"]


@pytest.mark.parametrize("name", list(RUNS))
def test_unlearn_report_is_the_pinned_one(name, tmp_path):
    pins = json.loads(PIN.read_text(encoding="utf-8"))
    assert name in pins, f"no pin for {name}; regenerate on purpose: python tests/cli/test_cli_pins.py"
    report = run_report(name, tmp_path)
    assert report["forgotten"] and any(r["acc_before"] is not None for r in report["forgotten"])
    problems = mismatches(report, pins[name])
    assert not problems, f"{name}: the unlearn report moved from its pin: " + "; ".join(problems[:10])


if __name__ == "__main__":
    pins = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in RUNS:
            pins[run] = run_report(run, Path(tmp) / run)
            print(f"pinned {run}")
    tmp_file = PIN.with_name(PIN.name + ".tmp")
    tmp_file.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp_file.replace(PIN)
    print(f"wrote {PIN}")
