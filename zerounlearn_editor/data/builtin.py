"""Data shipped inside the package (xz-compressed in ``data/embedded/``, licences in its ``NOTICE.md``).

- the statistics corpus ``wiki_passages_3643`` (3,643 Wikipedia passages, JSONL; CC BY-SA), the default
  ``mom2_dataset`` of every shipped YAML, read by name (:func:`builtin_corpus_bytes`);
- the perplexity text ``wikitext2_raw_test.txt`` (WikiText-2 raw test split; CC BY-SA 3.0), unpacked once
  into the cache folder (:func:`default_ppl_text`).

Both decompress to exactly the bytes of the shared data files (``text/wiki_passages_3643.jsonl``,
``text/wikitext2_raw_test.txt``), so fingerprints and statistics caches of either source agree.
"""
from __future__ import annotations

import hashlib
import lzma
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Dict, Optional

from zerounlearn_editor.support.files import sha256_of_file, write_bytes_atomic

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"

BUILTIN_CORPORA: Dict[str, str] = {"wiki_passages_3643": "wiki_passages_3643.jsonl.xz"}
"""Built-in corpus name (also its statistics cache name) -> compressed file in :data:`EMBEDDED_DIR`."""

CORPUS_ALIASES: Dict[str, str] = {"wiki_passages": "wiki_passages_3643"}
"""Other spellings of a built-in corpus name."""

PPL_TEXT_NAME = "wikitext2_raw_test.txt"
"""The embedded perplexity text (WikiText-2 raw test split)."""

_SHA256 = {
    "wiki_passages_3643.jsonl.xz": "b5ef925659848b3f503b2302199d116a1e887d80d4e262c479c014c36cfb6f81",
    "wikitext2_raw_test.txt.xz": "bbf94c53a05abe9ee670d3b6343608095822c85e26de37c70b24fc571964574a",
}
"""SHA-256 of each file's decompressed bytes (= the shared data files')."""


def builtin_corpus_name(source: str) -> Optional[str]:
    """The canonical built-in corpus name for ``source``, or ``None`` if it names none."""
    name = str(source).strip()
    name = CORPUS_ALIASES.get(name, name)
    return name if name in BUILTIN_CORPORA else None


def _read_embedded(file_name: str) -> bytes:
    """Decompressed bytes of an embedded file, checked against its recorded SHA-256."""
    path = EMBEDDED_DIR / file_name
    if not path.is_file():
        raise FileNotFoundError(
            f"embedded data file {path} is missing: the package was installed without its data "
            "(reinstall zerounlearn-editor; package_data in setup.cfg lists data/embedded/*)"
        )
    with lzma.open(path, "rb") as handle:
        data = handle.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != _SHA256[file_name]:
        raise ValueError(f"embedded data file {path} is damaged: SHA-256 {digest}, expected {_SHA256[file_name]}")
    return data


@lru_cache(maxsize=4)
def builtin_corpus_bytes(name: str) -> bytes:
    """The decompressed JSONL bytes of a built-in corpus (``name`` or an alias)."""
    canonical = builtin_corpus_name(name)
    if canonical is None:
        raise KeyError(f"no built-in corpus {name!r}; built-in: {', '.join(BUILTIN_CORPORA)}")
    return _read_embedded(BUILTIN_CORPORA[canonical])


def default_ppl_text(cache_dir: Optional[Path] = None) -> Path:
    """The default perplexity text (the embedded WikiText-2 test split), unpacked once (atomically) into
    ``cache_dir`` (default ``<cache>/data``, else a per-user temporary folder); a wrong copy is replaced."""
    from zerounlearn_editor.support.model_zoo import default_cache_dir  # no torch import on this path

    compressed = f"{PPL_TEXT_NAME}.xz"
    user = os.getuid() if hasattr(os, "getuid") else "user"
    folders = [Path(cache_dir)] if cache_dir is not None else [
        default_cache_dir() / "data", Path(tempfile.gettempdir()) / f"zerounlearn_editor-{user}"]
    last_error: Optional[OSError] = None
    for folder in folders:
        target = folder / PPL_TEXT_NAME
        try:
            if target.is_file() and sha256_of_file(target) == _SHA256[compressed]:
                return target
            write_bytes_atomic(target, _read_embedded(compressed))  # creates the folder
            return target
        except OSError as exc:  # read-only or not permitted: try the next folder
            if cache_dir is not None:
                raise
            last_error = exc
    raise OSError(f"cannot unpack the embedded {PPL_TEXT_NAME}: no writable cache folder ({last_error})")

