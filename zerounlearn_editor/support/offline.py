"""When a name that is not a local file or folder may go to a model/data hub.

Offline is the default: a corpus or model name that is neither a local path nor a known alias fails at once,
naming what was looked for. The hub is used only when asked for: ``hub:NAME`` for one name, or
``ZEROUNLEARN_ONLINE=1`` for every name. A model already in the Hugging Face cache is found offline.
"""
from __future__ import annotations

import os
from typing import Tuple

ONLINE_ENV = "ZEROUNLEARN_ONLINE"
HUB_PREFIX = "hub:"


def split_hub_name(name: str) -> Tuple[str, bool]:
    """``"hub:x"`` -> ``("x", True)``; else ``(name, whether $ZEROUNLEARN_ONLINE is 1/true/yes/on)``."""
    if name.startswith(HUB_PREFIX):
        return name[len(HUB_PREFIX):], True
    return name, os.environ.get(ONLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def offline_hint(name: str) -> str:
    """How to ask for the hub explicitly."""
    return f"to fetch it from the hub, write '{HUB_PREFIX}{name}' or set {ONLINE_ENV}=1"
