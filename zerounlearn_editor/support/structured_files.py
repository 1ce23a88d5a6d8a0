"""Strict readers of structured files (YAML, JSON): a key given twice in one mapping is an error.

The ground floor of the package's loaders: the hparams loader
(:func:`zerounlearn_editor.engine.hparams.load_config_file`) and the record files
(:mod:`zerounlearn_editor.data.record_files`) read through these.
"""
from __future__ import annotations

import json
from typing import Any, Dict

import yaml

__all__ = ["UniqueKeySafeLoader", "unique_json_pairs"]


class UniqueKeySafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: Dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {line}; first given on line {seen[key]})", key_node.start_mark
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
