"""Fluency of generated text as weighted n-gram entropy (the ROME/MEMIT "ngram_entropy").

Words are runs of word characters and every other non-space character is its own token
(``\\w+|[^\\w\\s]``; ROME uses NLTK's ``word_tokenize``, which differs only on contractions and a
few punctuation clusters, so values are close to, not identical with, ROME's). Repetitive,
degenerate generations score low.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WEIGHTS = {2: 2 / 3, 3: 4 / 3}  # n -> weight, as in ROME


def text_ngram_entropy(text: str) -> float:
    """Weighted n-gram entropy of one text: ``mean_n(weight_n * H_n(text))``, n = 2, 3, ``H`` in bits."""
    tokens = _TOKEN.findall(text)
    weighted = []
    for n, weight in _WEIGHTS.items():
        counts = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)).values()
        total = sum(counts)
        weighted.append(weight * (-sum(c / total * math.log2(c / total) for c in counts) if total else 0.0))
    return sum(weighted) / len(weighted)


def ngram_entropy(texts: Sequence[str]) -> float:
    """Mean over ``texts`` of :func:`text_ngram_entropy` (``nan`` for no texts)."""
    if not texts:
        return float("nan")
    return sum(text_ngram_entropy(t) for t in texts) / len(texts)
