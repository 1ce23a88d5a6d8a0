"""When a name that is not a local file or folder may go to a model/data hub.

Offline is the default: a corpus or model name that is neither a local path nor a known local
alias fails at once, naming what was looked for, instead of waiting on the hub's retries. The
hub is used only when the user asks for it:

* ``hub:NAME`` (e.g. ``hub:wikitext2``, ``hub:meta-llama/Llama-3.2-3B-Instruct``) for one name, or
* ``ZEROUNLEARN_ONLINE=1`` in the environment for every name.

A model already in the Hugging Face cache is still found offline (``local_files_only``).
"""
from __future__ import annotations

import os
from typing import Tuple

__all__ = ["ONLINE_ENV", "HUB_PREFIX", "hub_allowed", "split_hub_name", "offline_hint"]

ONLINE_ENV = "ZEROUNLEARN_ONLINE"
HUB_PREFIX = "hub:"


def hub_allowed() -> bool:
    """``ZEROUNLEARN_ONLINE`` is set to 1/true/yes/on."""
    return os.environ.get(ONLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def split_hub_name(name: str) -> Tuple[str, bool]:
    """``"hub:x"`` -> ``("x", True)``; anything else -> ``(name, hub_allowed())``."""
    if name.startswith(HUB_PREFIX):
        return name[len(HUB_PREFIX):], True
    return name, hub_allowed()


def offline_hint(name: str) -> str:
    """How to ask for the hub explicitly."""
    return f"to fetch it from the hub, write '{HUB_PREFIX}{name}' or set {ONLINE_ENV}=1"
