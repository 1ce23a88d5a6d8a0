"""The shape of a ledger (:mod:`~zerounlearn_editor.applications.ledger`), checked before any model loads.

A ledger whose hash matches may still be malformed (written by hand with its hash recomputed, or by another
tool): :func:`check_ledger_schema` checks every field the continuation reads (type, and for lists and mappings
the type of each entry) and raises a one-line ``ValueError`` naming the field (``facts[2].edit``,
``statistics.counts.16``), so no malformed field reaches the code as a traceback. Keys the schema does not know
are left alone (they are covered by the ledger's hash).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Tuple, Type, Union


@dataclass(frozen=True)
class ListOf:
    """A JSON list whose entries each match ``item``; ``non_empty``: at least one entry."""

    item: "Spec"
    non_empty: bool = False


@dataclass(frozen=True)
class MapOf:
    """A JSON object with any keys; each value matches ``value``; ``int_keys``: every key is an integer's text."""

    value: "Spec"
    int_keys: bool = False


@dataclass(frozen=True)
class Optional_:
    """A key that may be absent (its value, when there, matches ``spec``)."""

    spec: "Spec"


Spec = Union[str, ListOf, MapOf, Mapping[str, Any], Optional_]
"""``"str"``, ``"int"``, ``"number"``, ``"str?"`` (a string or null), a :class:`ListOf`, a :class:`MapOf`, or a
mapping of key -> spec (an object with those keys; :class:`Optional_` ones may be absent)."""

FACT: Mapping[str, Spec] = {
    "prompt": "str", "subject": "str", "answer": Optional_("str?"), "edit": "int", "time": Optional_("str"),
    "status": Optional_("str"), "as_of_edit": Optional_("int"),
}
EDIT: Mapping[str, Spec] = {
    "time": "str", "hparams_file": "str", "hparams_sha256": "str", "facts_file": "str", "n_facts": "int",
}
LEDGER: Mapping[str, Spec] = {
    "format": "str",
    "method": "str",
    "rewrite_module_tmp": "str",
    "layers": ListOf("int", non_empty=True),
    "saved": "str",
    "base_model": {"name": "str", "basename": "str", "fingerprint": "str", "fingerprint_unedited_modules": "str"},
    "statistics": {"stats_dir": "str", "model_name": "str", "corpus": "str", "n_samples": "int", "dtype": "str",
                   "max_length": "int", "files": MapOf("str", int_keys=True),
                   "counts": Optional_(MapOf("int", int_keys=True))},
    "edits": ListOf(EDIT, non_empty=True),
    "facts": ListOf(FACT),
    "context_prefixes": Optional_(ListOf({"count": "int", "length": "int", "seed": "int", "prefixes": ListOf("str")})),
    "model_fingerprint": "str",
    "weights_digest": "str",
    "weights_dtype": Optional_("str"),
    "files_sha256": Optional_(MapOf("str")),
    "answered_rule": Optional_("str"),
}

_SCALARS = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check(value: Any, spec: Spec, field: str) -> Tuple[str, ...]:
    """The first problem of ``value`` against ``spec`` as ``(field, expected, got)``, or ``()``."""
    if isinstance(spec, str):
        test, expected = _SCALARS[spec]
        return () if test(value) else (field, expected, f"{_kind(value)} {value!r}")
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return field, "a list", f"{_kind(value)} {value!r}"
        if spec.non_empty and not value:
            return field, "a non-empty list", "[]"
        for index, item in enumerate(value):
            problem = _check(item, spec.item, f"{field}[{index}]")
            if problem:
                return problem
        return ()
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            return field, "an object", f"{_kind(value)} {value!r}"
        for key, item in value.items():
            if spec.int_keys and not key.lstrip("-").isdigit():
                return f"{field}.{key}", "a layer number as key", repr(key)
            problem = _check(item, spec.value, f"{field}.{key}")
            if problem:
                return problem
        return ()
    if not isinstance(value, dict):
        return field, "an object", f"{_kind(value)} {value!r}"
    for key, sub in spec.items():
        name = f"{field}.{key}" if field else key
        if key not in value:
            if isinstance(sub, Optional_):
                continue
            return name, "present", "missing"
        problem = _check(value[key], sub.spec if isinstance(sub, Optional_) else sub, name)
        if problem:
            return problem
    return ()


def check_ledger_schema(ledger: Any, source: str, error: Type[ValueError] = ValueError) -> None:
    """Raise ``error`` (``"<source>: malformed ledger: field <name> must be <expected>, got <value>"``) for the first
    field of ``ledger`` that does not match :data:`LEDGER`, or a fact naming an edit the ledger does not list."""
    problem = _check(ledger, LEDGER, "")
    if problem:
        field, expected, got = problem
        got = got if len(got) <= 80 else got[:77] + "..."
        raise error(f"{source}: malformed ledger: field {field or '(top level)'} must be {expected}, got {got}")
    for index, fact in enumerate(ledger["facts"]):
        if not 0 <= fact["edit"] < len(ledger["edits"]):
            raise error(f"{source}: malformed ledger: field facts[{index}].edit is {fact['edit']}, the ledger "
                             f"lists edits 0..{len(ledger['edits']) - 1}")


__all__ = ["EDIT", "FACT", "LEDGER", "ListOf", "MapOf", "Optional_", "check_ledger_schema"]
