"""Strided-window perplexity of a causal LM on held-out text.

The text (a file, e.g. ``../shared/data/text/wikitext2_raw_test.txt``, or a string) is
tokenized as one stream (``tok(text)``, so with the tokenizer's special tokens, e.g. a BOS at
the very start) and cut to its first ``max_tokens`` tokens. Windows of ``window`` tokens start
every ``stride`` tokens (the last one may be shorter). Each token is scored at most once, in
the first window that reaches it, and only with some context in that window:

    window [begin, end) scores positions max(prev_end, begin + 1) .. end - 1

where ``prev_end`` is the previous window's end. With ``stride == window`` the windows are
disjoint and each window's first token goes unscored; with ``stride < window`` every token but
the first is scored with at least ``window - stride`` tokens of context. The result is
``exp(total NLL / number of scored tokens)``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List, Union

import torch

from zerounlearn_editor.support.progress import progress_bar
from zerounlearn_editor.evaluation.batching import (
    forward_logits,
    model_device,
    pad_sequences,
    pad_token_id,
    resolve_padding_side,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Window:
    """Token range ``[begin, end)`` of the stream, scoring positions ``[score_from, end)``."""

    begin: int
    end: int
    score_from: int


def read_text(text_path_or_text: Union[str, os.PathLike]) -> str:
    """The file's content if given a path (``Path`` or an existing file name), else the string.

    Raises:
        FileNotFoundError: a ``Path``, or a string without whitespace that contains a path
            separator or ends in ``.txt``, names no existing file (a mistyped path is not
            silently scored as text).
    """
    if isinstance(text_path_or_text, os.PathLike):
        return Path(text_path_or_text).read_text(encoding="utf-8")
    text = text_path_or_text
    if len(text) < 4096 and not any(ch.isspace() for ch in text):
        if os.path.isfile(text):
            return Path(text).read_text(encoding="utf-8")
        if "/" in text or os.sep in text or text.endswith(".txt"):
            raise FileNotFoundError(f"text file not found: {text}")
    elif "\n" not in text and len(text) < 4096 and os.path.isfile(text):
        return Path(text).read_text(encoding="utf-8")
    return text


def leading_token_ids(tok: "PreTrainedTokenizerBase", text: str, max_tokens: int) -> List[int]:
    """The first ``max_tokens`` token ids of ``tok(text)``, tokenizing only a long-enough prefix.

    A character prefix is tokenized and grown until it yields more than ``max_tokens`` tokens
    (so the possibly cut last word lies beyond the kept tokens), or the whole text is used.
    """
    chars = max(1024, 8 * max_tokens)
    while True:
        ids = tok(text[:chars])["input_ids"]
        if len(ids) > max_tokens or chars >= len(text):
            return list(ids[:max_tokens])
        chars *= 2


def plan_windows(n_tokens: int, window: int, stride: int) -> List[Window]:
    """The strided windows over ``n_tokens`` tokens (see module docstring)."""
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    if not 1 <= stride <= window:
        raise ValueError(f"stride must be in [1, window], got {stride}")
    windows: List[Window] = []
    prev_end = 0
    for begin in range(0, n_tokens, stride):
        end = min(begin + window, n_tokens)
        score_from = max(prev_end, begin + 1)
        if score_from < end:
            windows.append(Window(begin, end, score_from))
        prev_end = end
        if end == n_tokens:
            break
    return windows


def perplexity(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    text_path_or_text: Union[str, os.PathLike],
    max_tokens: int = 20000,
    window: int = 512,
    stride: int = 512,
    batch_size: int = 4,
) -> float:
    """Perplexity over the first ``max_tokens`` tokens of a text, in batched strided windows.

    Args:
        model: causal LM (put in eval mode and left there).
        tok: its tokenizer (not modified).
        text_path_or_text: a path to a UTF-8 text file or the text itself.
        max_tokens: tokens of the stream to use.
        window: tokens per forward window.
        stride: step between window starts (``1 <= stride <= window``).
        batch_size: windows per forward pass.

    Returns:
        ``exp(mean NLL)`` over the scored tokens.

    Raises:
        ValueError: fewer than two tokens, or invalid window/stride/batch size.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids = leading_token_ids(tok, read_text(text_path_or_text), max_tokens)
    if len(ids) < 2:
        raise ValueError("perplexity needs at least two tokens of text")
    windows = plan_windows(len(ids), window, stride)
    model.eval()
    device = model_device(model)
    pad_id = pad_token_id(tok)
    side = resolve_padding_side(tok, None)
    total_nll = 0.0
    total_count = 0
    with torch.no_grad():
        for start in progress_bar(range(0, len(windows), batch_size), desc=f"perplexity ({len(ids)} tokens)", unit="batch"):
            chunk = windows[start : start + batch_size]
            batch = pad_sequences([ids[w.begin : w.end] for w in chunk], pad_id, side, device)
            logits = forward_logits(model, batch)  # [B, L, V]
            for row, w in enumerate(chunk):
                offset = batch.offsets[row]
                cols = torch.arange(offset + w.score_from - w.begin, offset + w.end - w.begin, device=device)
                step_logits = logits[row, cols - 1].float()  # [n, V]
                targets = batch.input_ids[row, cols]  # [n]
                nll = torch.nn.functional.cross_entropy(step_logits, targets, reduction="sum")
                total_nll += float(nll)
                total_count += int(cols.numel())
    return math.exp(total_nll / total_count)
