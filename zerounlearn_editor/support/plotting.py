"""The one opening and ending of every picture: matplotlib is optional, a figure is saved atomically.

``plt = pyplot("the rounds plot")`` gives ``matplotlib.pyplot`` on the non-interactive Agg backend, or
``None`` after one WARNING saying what was not drawn and how to get matplotlib (the numbers a picture
shows are always written beside it). :func:`save_figure` writes the figure through a temporary file in
the same folder and renames it, so a reader never sees half a PNG, and closes it.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any, Optional, Union

LOG = logging.getLogger(__name__)

__all__ = ["pyplot", "save_figure"]

INSTALL_HINT = "pip install 'zerounlearn-editor[bench]'"


def pyplot(what: str) -> Optional[ModuleType]:
    """``matplotlib.pyplot`` (Agg backend), or ``None`` with a WARNING that ``what`` was not drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        LOG.warning("matplotlib is not installed, so %s was not drawn (%s); the numbers were written", what,
                    INSTALL_HINT)
        return None
    return plt


def save_figure(fig: Any, path: Union[str, Path], dpi: int = 120) -> Path:
    """Save ``fig`` to ``path`` atomically (temporary file in the same folder, then a rename) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")  # same suffix: savefig picks the format from it
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if tmp.exists():
            tmp.unlink()
    return path
