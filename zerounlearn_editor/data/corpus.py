"""General-text corpora for the utility statistic ``C0``. Accepted sources:

- a built-in corpus name: ``wiki_passages_3643`` (alias ``wiki_passages``), shipped with the package
  (:mod:`.builtin`), the default of every shipped YAML; fingerprint = that of the same ``.jsonl`` file;
- a ``.txt`` file: passages separated by blank lines, or one passage per line without blank lines;
- a ``.jsonl`` file with a ``text`` field on every line;
- a folder written by ``datasets``' ``save_to_disk`` (column ``text``; split ``train`` of a ``DatasetDict``);
- a hub dataset name (``wikipedia``, ``wikitext``, ``wikitext2`` or ``owner/name``), only when asked for
  (``hub:NAME`` or ``ZEROUNLEARN_ONLINE=1``); otherwise a name that is not a file fails at once.
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from zerounlearn_editor.data.builtin import builtin_corpus_bytes, builtin_corpus_name
from zerounlearn_editor.support.files import sha256_of_file
from zerounlearn_editor.support.offline import offline_hint, split_hub_name

HUB_DATASETS = {
    "wikitext": ("Salesforce/wikitext", "wikitext-103-raw-v1"),
    "wikitext2": ("Salesforce/wikitext", "wikitext-2-raw-v1"),
    "wikipedia": ("wikimedia/wikipedia", "20231101.en"),
}


class CorpusError(ValueError):
    """The corpus is missing, empty or malformed (message names the file and line)."""


@dataclass
class Corpus:
    """Passages of text; ``fingerprint`` keys the statistics cache (named by ``stats.corpus_cache_name``)."""

    texts: List[str]
    fingerprint: str


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise CorpusError(f"{path}: line {line}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from exc


def _parse_jsonl_lines(lines: Iterable[str], where: str) -> List[str]:
    """The non-blank ``text`` fields of JSONL lines, in order; errors name ``where`` and the line."""
    texts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{where}: line {number}: invalid JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise CorpusError(f"{where}: line {number}: missing string field 'text'")
        if record["text"].strip():
            texts.append(record["text"])
    return texts


def _read_saved_dataset(path: Path) -> List[str]:
    import datasets  # optional dependency, only for this format

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise CorpusError(f"{path}: saved DatasetDict has no 'train' split (splits: {list(ds)})")
        ds = ds["train"]
    if "text" not in ds.column_names:
        raise CorpusError(f"{path}: saved dataset has no 'text' column (columns: {ds.column_names})")
    return [t for t in ds["text"] if isinstance(t, str) and t.strip()]


def _read_hub(name: str, limit: Optional[int]) -> List[str]:
    import datasets

    hub_name, config = HUB_DATASETS.get(name, (name, None))
    split = "train" if limit is None else f"train[:{limit}]"
    ds = datasets.load_dataset(hub_name, config, split=split)
    return [t for t in ds["text"] if isinstance(t, str) and t.strip()]


def _resolve(source: str) -> Tuple[str, str]:
    """``("builtin", name)``, ``("dir" | "file", path)`` or ``("hub", name)``; else :class:`CorpusError`."""
    builtin = builtin_corpus_name(source)
    if builtin is not None:
        return "builtin", builtin
    path = Path(source).expanduser()
    if path.is_dir():
        return "dir", str(path)
    if path.is_file():
        if path.suffix.lower() not in (".txt", ".jsonl"):
            raise CorpusError(f"{path}: unsupported corpus format (use .txt, .jsonl or a saved dataset folder)")
        return "file", str(path)
    if path.suffix.lower() in (".txt", ".jsonl", ".json") or path.exists():
        raise CorpusError(f"corpus file not found: {path}")
    hub_name, online = split_hub_name(source)
    if not online:
        raise CorpusError(f"corpus {source!r}: no such file or folder ({path.resolve()}), and the hub is "
                          f"off; {offline_hint(source)}")
    return "hub", hub_name


def check_corpus_source(source: str) -> None:
    """Fail fast (before a model is loaded) when ``source`` cannot be a corpus; reads nothing."""
    _resolve(source)


def load_corpus(source: str, limit: Optional[int] = None) -> Corpus:
    """At most ``limit`` passages of ``source`` (a built-in name, a path or a hub dataset name); a built-in
    name wins over a file or folder of the same name in the working directory (``./name`` means the file)."""
    if limit is not None and limit < 1:
        raise CorpusError(f"corpus {source!r}: the number of passages must be >= 1, got {limit}")
    kind, what = _resolve(source)
    if kind == "builtin":
        data = builtin_corpus_bytes(what)
        # read exactly as a .jsonl file of the same bytes is read (same newline handling)
        with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8") as handle:
            texts = _parse_jsonl_lines(handle, f"built-in corpus {what}")
        return Corpus(texts=texts[:limit], fingerprint=hashlib.sha256(data).hexdigest())
    path = Path(what)
    if kind == "dir":
        texts, fingerprint = _read_saved_dataset(path), f"dir:{path.resolve()}"
    elif kind == "file":
        if path.suffix.lower() == ".jsonl":
            texts = _parse_jsonl_lines(_read_text(path).split("\n"), str(path))
        else:  # passages separated by blank lines (lines of one passage joined by a space), else one per line
            lines = [line.strip() for line in _read_text(path).splitlines()]
            texts = lines if all(lines) else [" ".join(group) for non_blank, group in groupby(lines, key=bool)
                                              if non_blank]
        fingerprint = sha256_of_file(path)
    else:
        try:
            texts = _read_hub(what, limit)
        except (OSError, ConnectionError, ValueError) as exc:
            raise CorpusError(f"corpus {source!r}: not a local file, and the hub could not provide it: {exc}") from exc
        fingerprint = f"hub:{what}"
    if not texts:
        raise CorpusError(f"corpus {source!r} is empty: no passages of text found")
    return Corpus(texts=texts[:limit], fingerprint=fingerprint)
