"""The one strict reader of structured files (JSON, JSONL, YAML): a key given twice in one mapping is an error.

:func:`read_structured` parses by suffix (YAML with a ``SafeLoader``: no Python tags) and reports every
problem through the caller's own exception class, the message starting with what went wrong and never with
a traceback. Its callers: the hparams loader (:func:`zerounlearn_editor.engine.hparams.load_config_file`),
the record files (:mod:`zerounlearn_editor.data.record_files`), the datasets
(:func:`zerounlearn_editor.data.records.read_json_records`) and the bench's run files
(:func:`zerounlearn_editor.harness.runfile.load_runfile`). Whether the file exists is the caller's check.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

import yaml

__all__ = ["UniqueKeySafeLoader", "unique_json_pairs", "read_structured"]


class UniqueKeySafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: Dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (line {line}; first given on line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def unique_json_pairs(pairs):
    """``object_pairs_hook`` for :func:`json.loads` that rejects a key given twice in one object."""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise json.JSONDecodeError(f"duplicate key(s) {repeated}", "", 0)
    return dict(pairs)


def read_structured(path: Union[str, Path], what: str, error: Callable[[str], Exception],
                    suffix: Optional[str] = None, data: Optional[bytes] = None) -> Any:
    """The parsed content of ``path``: ``.json`` one JSON value, ``.jsonl`` the list of its non-empty lines'
    values, anything else YAML (``suffix`` overrides the file's own).

    A problem raises ``error(message)``, ``message`` naming it without the path (``"not UTF-8 text ..."``,
    ``"line 3: invalid JSON: ..."``, ``"cannot parse <what>: ..."``); the caller's ``error`` adds the path
    as its exception class does. ``data``: the file's bytes when the caller has read them already (the file is
    not opened again).
    """
    path = Path(path)
    try:
        text = (path.read_bytes() if data is None else data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc})") from exc
    kind = (suffix or path.suffix).lower()
    if kind == ".jsonl":
        values: List[Any] = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                values.append(json.loads(line, object_pairs_hook=unique_json_pairs))
            except json.JSONDecodeError as exc:
                raise error(f"line {line_no}: invalid JSON: {exc}") from exc
        return values
    try:
        if kind == ".json":
            return json.loads(text, object_pairs_hook=unique_json_pairs)
        return yaml.load(text, Loader=UniqueKeySafeLoader)  # a SafeLoader that refuses repeated keys
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise error(f"cannot parse {what}: {exc}") from exc
