"""Fluency of generated text as weighted n-gram entropy (the ROME/MEMIT "ngram_entropy").

For one text: split into word/punctuation tokens, and for each ``n`` in ``ns`` compute the
entropy (base 2) of its n-gram frequency distribution; the text's score is the arithmetic
mean of ``weights[i] * H_{ns[i]}`` (defaults ``ns=(2, 3)``, ``weights=(2/3, 4/3)`` as in
ROME). :func:`ngram_entropy` averages that over texts. Repetitive, degenerate generations
score low.

Tokenization: ROME uses NLTK's ``word_tokenize``; to avoid that dependency words are runs of
word characters and every other non-space character is its own token (``\\w+|[^\\w\\s]``).
This differs from NLTK only on contractions and a few punctuation clusters, so absolute
values are close to, not identical with, ROME's.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import List, Sequence

__all__ = ["ngram_entropy", "text_ngram_entropy", "word_tokens"]

_TOKEN = re.compile(r"\w+|[^\w\s]")


def word_tokens(text: str) -> List[str]:
    """Word and punctuation tokens of ``text``."""
    return _TOKEN.findall(text)


def _entropy_bits(counts: Counter) -> float:
    """Entropy in bits of the distribution given by ``counts`` (0 for an empty one)."""
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def text_ngram_entropy(
    text: str, ns: Sequence[int] = (2, 3), weights: Sequence[float] = (2 / 3, 4 / 3)
) -> float:
    """Weighted n-gram entropy of one text: ``mean_i(weights[i] * H_{ns[i]}(text))``."""
    if len(ns) != len(weights) or not ns:
        raise ValueError("ns and weights must be non-empty and of equal length")
    tokens = word_tokens(text)
    weighted = []
    for n, weight in zip(ns, weights):
        grams = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
        weighted.append(weight * _entropy_bits(grams))
    return sum(weighted) / len(weighted)


def ngram_entropy(
    texts: Sequence[str], ns: Sequence[int] = (2, 3), weights: Sequence[float] = (2 / 3, 4 / 3)
) -> float:
    """Mean over ``texts`` of :func:`text_ngram_entropy` (``nan`` for no texts)."""
    if not texts:
        return float("nan")
    return sum(text_ngram_entropy(t, ns, weights) for t in texts) / len(texts)
