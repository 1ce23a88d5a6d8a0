"""``benchmarks/gemma/layers_diag.py``: the per-case rows that let seeds be pooled or split by case, and which
variants get the retain set."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("gemma_layers_diag", ROOT / "benchmarks/gemma/layers_diag.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _per_case_rows():
    return _module().per_case_rows


def test_rows_keep_case_order_answered_and_neighbour_accuracies() -> None:
    scores = [SimpleNamespace(forget={"first_acc": [1.0]}, neighbour={"acc": [0.5, 1.0]}),
              SimpleNamespace(forget={"first_acc": [0.0]}, neighbour={"acc": []})]
    rows = _per_case_rows()(["7", "3"], scores)
    assert rows == [dict(case_id="7", answered=True, neighbour_acc=[0.5, 1.0]),
                    dict(case_id="3", answered=False, neighbour_acc=[])]


def _variant_retain():
    return _module().variant_retain


def test_retain_set_goes_only_to_variants_with_a_retain_weight() -> None:
    retain = [dict(prompt="Windows 95 is developed by", subject="Windows 95")]
    with_weight = SimpleNamespace(retain_weights=lambda: {"retain_nullspace_weight": 0.1})
    without = SimpleNamespace(retain_weights=lambda: {"retain_nullspace_weight": 0.0})
    pick = _variant_retain()
    assert pick(with_weight, retain) is retain
    assert pick(without, retain) is None
    assert pick(with_weight, []) is None
