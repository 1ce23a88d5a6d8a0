"""``benchmarks/deep/audit_variants.py --half``: the tuning and report halves of the known cases are disjoint."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("deep_audit_variants", ROOT / "benchmarks/deep/audit_variants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("count", [7, 80])
def test_halves_split_the_known_cases(count: int) -> None:
    half_of = _load().half_of
    ids = [str(i * 37 % 1000 + 3) for i in range(count)]  # unsorted, unequal gaps
    cases = [SimpleNamespace(case_id=i) for i in ids]
    select = lambda *args, **kwargs: list(cases)  # noqa: E731
    tune = [c.case_id for c in half_of(select, "tune")(None, None, cases, None)]
    report = [c.case_id for c in half_of(select, "report")(None, None, cases, None)]
    assert not set(tune) & set(report)
    assert sorted(tune + report) == sorted(ids)
    assert len(tune) == (count + 1) // 2 and len(report) == count // 2
    ordered = sorted(ids, key=int)
    assert tune == ordered[0::2] and report == ordered[1::2]
    assert [c.case_id for c in half_of(select, None)(None, None, cases, None)] == ids
