"""``benchmarks/gemma/layers_diag.py``: the per-case rows that let seeds be pooled or split by case."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def _per_case_rows():
    spec = importlib.util.spec_from_file_location("gemma_layers_diag", ROOT / "benchmarks/gemma/layers_diag.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.per_case_rows


def test_rows_keep_case_order_answered_and_neighbour_accuracies() -> None:
    scores = [SimpleNamespace(forget={"first_acc": [1.0]}, neighbour={"acc": [0.5, 1.0]}),
              SimpleNamespace(forget={"first_acc": [0.0]}, neighbour={"acc": []})]
    rows = _per_case_rows()(["7", "3"], scores)
    assert rows == [dict(case_id="7", answered=True, neighbour_acc=[0.5, 1.0]),
                    dict(case_id="3", answered=False, neighbour_acc=[])]
