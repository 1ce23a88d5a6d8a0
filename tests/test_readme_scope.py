"""README.md is for users: short enough to read (at most :data:`MAX_LINES` lines) and free of notebook material
(the names of retired experiments and of measurement-machine details live in ``benchmarks/RESULTS.md``)."""
from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
MAX_LINES = 350
NOTEBOOK_WORDS = ("forgotten_protection_weight", "forgotten_state", "malloc_trim", "ZeroUnlearn-GD+P",
                  "historical name", "this machine")
"""Words that only notebook material uses: a retired experiment's key, state file and bench row, an allocator
detail of one measurement, a name kept for history, a sentence about the machine a figure was taken on."""


def test_readme_is_at_most_max_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md: {len(lines)} lines (at most {MAX_LINES}); move notebook material out"


def test_readme_names_no_retired_experiment_or_machine_detail():
    text = README.read_text(encoding="utf-8")
    assert [w for w in NOTEBOOK_WORDS if w.lower() in text.lower()] == []
