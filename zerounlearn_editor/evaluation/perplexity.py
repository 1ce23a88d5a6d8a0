"""Strided-window perplexity of a causal LM on held-out text.

The text is tokenized as one stream (``tok(text)``, with the tokenizer's special tokens) and cut to
its first ``max_tokens`` tokens. Windows of ``window`` tokens start every ``stride`` tokens (the last
may be shorter); each token is scored once, in the first window that reaches it, with some context:
window ``[begin, end)`` scores positions ``max(prev_end, begin + 1) .. end - 1``. With ``stride ==
window`` each window's first token goes unscored; with ``stride < window`` every token but the first
has at least ``window - stride`` tokens of context.

Where the tokenizer opens the text with its BOS token (Gemma, Llama-3; not SmolLM2, GPT-2 or Qwen), every window
opens with it too (``bos_windows``, the default), as every document the model was trained on does: the text after
the BOS is cut into windows of ``window - 1`` tokens (stride ``min(stride, window - 1)``), each read as ``[BOS] +
its tokens``, and every one of its tokens not scored before is scored, the first with the BOS as its context.
Without it, Gemma-3-270m's perplexity on the first 5000 tokens of WikiText-2 is 69.6, with it 27.4, and an edit's
change differs by up to four times (+16.9% against +3.9%: benchmarks/RESULTS.md 12.22). A text the tokenizer does
not open with BOS is scored exactly as before; ``bos_windows=False`` scores a BOS-opened text as tokenized (the
layout of results stored before this rule).

A forward pass holds ``windows x window x vocab`` float logits: windows per pass are capped so that these fit in
:data:`LOGITS_BUDGET_BYTES` (a 262k-token vocabulary such as Gemma-3's takes 537 MB a 512-token window), which
changes how many windows share a pass, never which tokens are scored or with what context.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from zerounlearn_editor.evaluation.batching import logit_batches

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


LOGITS_BUDGET_BYTES = 1 << 29
"""Bytes of float32 logits one perplexity forward pass may hold (at least one window is always scored)."""


class Window(NamedTuple):
    """Token range ``[begin, end)`` of the stream, scoring positions ``[score_from, end)``."""

    begin: int
    end: int
    score_from: int


def read_text(text_path_or_text: Union[str, os.PathLike]) -> str:
    """The file's content if given a path (``Path`` or an existing file name), else the string.

    A string without whitespace that contains a path separator or ends in ``.txt`` but names no
    file raises ``FileNotFoundError`` (a mistyped path is not silently scored as text).
    """
    if isinstance(text_path_or_text, os.PathLike):
        return Path(text_path_or_text).read_text(encoding="utf-8")
    text = text_path_or_text
    if len(text) < 4096 and "\n" not in text and os.path.isfile(text):
        return Path(text).read_text(encoding="utf-8")
    if len(text) < 4096 and not any(ch.isspace() for ch in text) and ("/" in text or os.sep in text
                                                                       or text.endswith(".txt")):
        raise FileNotFoundError(f"text file not found: {text}")
    return text


def check_ppl_text(path: Union[str, os.PathLike]) -> str:
    """The perplexity text of ``path``, read once; refuse (``ValueError`` naming ``--ppl-text`` and the file) one
    that is missing, not UTF-8, or holds no text (checked before a model loads; fewer than 2 tokens can only be
    told by the tokenizer)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--ppl-text {path}: cannot read the perplexity text ({exc})") from None
    if not text.strip():
        raise ValueError(f"--ppl-text {path}: the file holds no text; perplexity needs at least 2 tokens (give "
                         "another file, or --ppl-tokens 0)")
    return text


def leading_token_ids(tok: "PreTrainedTokenizerBase", text: str, max_tokens: int) -> List[int]:
    """The first ``max_tokens`` token ids of ``tok(text)``: a character prefix is tokenized and doubled until
    it yields more than ``max_tokens`` tokens (so a cut last word lies beyond them) or is the whole text."""
    chars = max(1024, 8 * max_tokens)
    while True:
        ids = tok(text[:chars])["input_ids"]
        if len(ids) > max_tokens or chars >= len(text):
            return list(ids[:max_tokens])
        chars *= 2


def plan_windows(n_tokens: int, window: int, stride: int, context_token: bool = False) -> List[Window]:
    """The strided windows over ``n_tokens`` tokens (see module docstring). ``context_token``: each window is read
    after a context token of its own (the BOS), so its first token is scored too (``score_from = max(prev_end,
    begin)``) and a window may hold one token."""
    if window < (1 if context_token else 2):
        raise ValueError(f"window must be >= {1 if context_token else 2}, got {window}")
    if not 1 <= stride <= window:
        raise ValueError(f"stride must be in [1, window], got {stride}")
    windows: List[Window] = []
    prev_end = 0
    for begin in range(0, n_tokens, stride):
        end = min(begin + window, n_tokens)
        score_from = max(prev_end, begin if context_token else begin + 1)
        if score_from < end:
            windows.append(Window(begin, end, score_from))
        prev_end = end
        if end == n_tokens:
            break
    return windows


def windows_per_pass(batch_size: int, window: int, vocab_size: int,
                     budget_bytes: int = LOGITS_BUDGET_BYTES) -> int:
    """``batch_size`` capped so that ``windows x window x vocab_size`` float32 logits fit in ``budget_bytes``
    (at least 1)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    per_window = 4 * window * max(1, vocab_size)
    return max(1, min(batch_size, budget_bytes // per_window))


def output_vocab_size(model: torch.nn.Module) -> int:
    """Rows of the model's output embedding (the logits' last dimension), else ``config.vocab_size``, else 1."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0])
    return int(getattr(getattr(model, "config", None), "vocab_size", 1) or 1)


def perplexity(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    text_path_or_text: Union[str, os.PathLike],
    max_tokens: int = 20000,
    window: int = 512,
    stride: int = 512,
    batch_size: int = 4,
    bos_windows: bool = True,
) -> float:
    """``exp(mean NLL)`` of the first ``max_tokens`` tokens of a text (a UTF-8 file or the text itself) in
    strided windows of ``window`` tokens, each opening with BOS where the tokenizer opens the text with it and
    ``bos_windows`` (module docstring), ``batch_size`` windows per forward pass (model put in eval mode)."""
    ids = leading_token_ids(tok, read_text(text_path_or_text), max_tokens)
    return perplexity_of_ids(model, tok, ids, window, stride, batch_size, bos_windows)


def opens_with_bos(tok: "PreTrainedTokenizerBase", ids: Sequence[int]) -> bool:
    """Whether the token stream ``ids`` starts with the tokenizer's BOS token (as ``tok(text)`` puts it first for
    Gemma and Llama-3)."""
    bos = getattr(tok, "bos_token_id", None)
    return bos is not None and len(ids) > 0 and int(ids[0]) == int(bos)


def window_inputs(ids: Sequence[int], window: int, stride: int, bos: Optional[int]) -> List[Tuple[Window, List[int]]]:
    """The windows a perplexity scores (pure): ``(window, input ids [<= window])`` pairs, the window in the
    stream's positions (it scores ``ids[score_from:end]``).

    ``bos=None``: :func:`plan_windows` over ``ids``, each read as ``ids[begin:end]``. ``bos`` given (``ids[0]`` is
    that BOS): windows of ``window - 1`` tokens over ``ids[1:]`` (stride ``min(stride, window - 1)``), each read
    as ``[bos] + ids[begin:end]``, scoring every token not scored before (the first window reads as
    ``ids[:window]``)."""
    if bos is None:
        return [(w, list(ids[w.begin:w.end])) for w in plan_windows(len(ids), window, stride)]
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    if not 1 <= stride <= window:
        raise ValueError(f"stride must be in [1, window], got {stride}")
    body = plan_windows(len(ids) - 1, window - 1, min(stride, window - 1), context_token=True)
    return [(Window(w.begin + 1, w.end + 1, w.score_from + 1), [int(bos)] + list(ids[w.begin + 1:w.end + 1]))
            for w in body]


def scored_windows(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    ids: List[int],
    window: int = 512,
    stride: int = 512,
    batch_size: int = 4,
    desc: Optional[str] = None,
    bos_windows: bool = True,
) -> Iterator[Tuple[Window, torch.Tensor, torch.Tensor]]:
    """Per window of :func:`window_inputs` (every window opens with BOS where ``ids`` does and ``bos_windows``), in
    batches of at most ``batch_size`` windows (fewer where their logits would exceed :data:`LOGITS_BUDGET_BYTES`):
    ``(window, step_logits [n, V] float32, targets [n])``, the logits predicting the window's ``n`` scored tokens
    ``ids[window.score_from:window.end]`` and those tokens."""
    bos = int(ids[0]) if bos_windows and opens_with_bos(tok, ids) else None
    planned = window_inputs(ids, window, stride, bos)
    # every window but the last has ``window`` tokens: the batches are runs of consecutive windows
    per_pass = windows_per_pass(batch_size, window, output_vocab_size(model), LOGITS_BUDGET_BYTES)
    lead = 0 if bos is None else 1  # input columns before the window's first stream token
    for indices, batch, logits in logit_batches(model, tok, [inputs for _, inputs in planned], per_pass,
                                                desc=desc):  # logits [B, L, V]
        for row, index in enumerate(indices):
            w = planned[index][0]
            shift = batch.offsets[row] + lead - w.begin  # stream position -> batch column
            first, stop = shift + w.score_from, shift + w.end  # scored columns [first, stop)
            yield w, logits[row, first - 1 : stop - 1].float(), batch.input_ids[row, first:stop]


def perplexity_of_ids(
    model: torch.nn.Module,
    tok: "PreTrainedTokenizerBase",
    ids: List[int],
    window: int = 512,
    stride: int = 512,
    batch_size: int = 4,
    bos_windows: bool = True,
) -> float:
    """:func:`perplexity` of a token stream already tokenized (``ids``: e.g. :func:`leading_token_ids` of a text
    read once, scored before and after an edit); at most ``batch_size`` windows a pass, fewer where their logits
    would exceed :data:`LOGITS_BUDGET_BYTES`."""
    if len(ids) < 2:
        raise ValueError("perplexity needs at least two tokens of text")
    total_nll = 0.0
    total_count = 0
    for _, step_logits, targets in scored_windows(model, tok, ids, window, stride, batch_size,
                                                  desc=f"perplexity ({len(ids)} tokens)", bos_windows=bos_windows):
        nll = torch.nn.functional.cross_entropy(step_logits, targets, reduction="sum")
        total_nll += float(nll)
        total_count += len(targets)
    return math.exp(total_nll / total_count)
