"""The one plotting helper (:mod:`zerounlearn_editor.support.plotting`): optional matplotlib, atomic save."""
from __future__ import annotations

import builtins
import logging

import pytest

from zerounlearn_editor.support.plotting import pyplot, save_figure


def test_without_matplotlib_one_warning_and_nothing_drawn(monkeypatch, caplog, tmp_path):
    from zerounlearn_editor.harness.rounds_report import plot_rounds

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with caplog.at_level(logging.INFO):
        assert pyplot("the test picture") is None
        summary = {"base": {"eff": {"mean": 1.0}}, "methods": {}}
        assert plot_rounds(summary, tmp_path / "r.png") is None
    records = [r for r in caplog.records if "matplotlib" in r.getMessage()]
    assert [r.levelname for r in records] == ["WARNING", "WARNING"]
    assert "the test picture was not drawn" in records[0].getMessage()
    assert "zerounlearn-editor[bench]" in records[1].getMessage() and not (tmp_path / "r.png").exists()


def test_save_is_atomic_and_keeps_the_old_file_on_failure(tmp_path):
    plt = pyplot("a test figure")
    if plt is None:
        pytest.skip("matplotlib is not installed")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    path = save_figure(fig, tmp_path / "sub" / "a.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.png"], "no temporary file is left"
    assert not plt.fignum_exists(fig.number), "the figure is closed"

    old = path.read_bytes()
    fig, _ = plt.subplots()

    def failing_savefig(target, dpi):
        with open(target, "wb") as handle:
            handle.write(b"half a PNG")
        raise OSError("disk full")

    fig.savefig = failing_savefig
    with pytest.raises(OSError, match="disk full"):
        save_figure(fig, path)
    assert path.read_bytes() == old, "a failed save leaves the previous picture whole"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.png"]
