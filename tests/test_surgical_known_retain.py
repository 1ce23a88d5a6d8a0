"""benchmarks/surgical.py's ``retain_known`` filter: it keeps exactly the retain requests whose true answer's
first token is the unedited model's top-1 next token (answers looked up in the pool by subject and prompt; the
batched probe scoring it calls is replaced by a table of what the model answers)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from zerounlearn_editor.data.types import UnlearnCase

ROOT = Path(__file__).resolve().parents[1]


def _surgical():
    spec = importlib.util.spec_from_file_location("surgical_script", ROOT / "benchmarks" / "surgical.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Model:
    """What the unedited model answers after a prompt: the word the table names for the prompt's last word."""

    def __init__(self, table):
        self.table = table

    def score(self, probes):
        """``evaluate_probes``' ``first_acc``: 1.0 where the answer's first word is the model's answer."""
        return {"first_acc": [float(self.table[p.prompt.split()[-1]] == p.answer.split()[0]) for p in probes]}


def _known_retain(surgical, model, retain, pool, monkeypatch):
    monkeypatch.setattr(surgical, "evaluate_probes", lambda m, tok, probes: m.score(probes))
    return surgical.known_retain(model, None, retain, pool)


def _case(subject, prompt, answer):
    request = {"prompt": prompt, "subject": subject, "ground_truth": answer, "target_new": ""}
    return UnlearnCase(case_id=subject, request=request, forget=[], paraphrase=[], neighbour=[], source="test")


def test_known_retain_keeps_only_answered_records_in_order(monkeypatch):
    surgical = _surgical()
    pool = [_case("A", "A lies in", "Paris"), _case("B", "B lies in", "Rome Italy"), _case("C", "C lies in", "Oslo")]
    # the model answers A with Paris (right), B with Rome (right first token), C with Paris (wrong)
    model = _Model({"in": "Paris"})
    retain = [{"prompt": c.request["prompt"], "subject": c.request["subject"]} for c in pool]
    assert _known_retain(surgical, model, retain, pool, monkeypatch) == [retain[0]]
    model.table["in"] = "Rome"
    assert _known_retain(surgical, model, list(reversed(retain)), pool, monkeypatch) == [retain[1]]
    model.table["in"] = "Berlin"
    assert _known_retain(surgical, model, retain, pool, monkeypatch) == []


def test_known_retain_keeps_several_in_the_given_order(monkeypatch):
    surgical = _surgical()
    pool = [_case("A", "A lies in", "Paris"), _case("B", "B is near", "Rome"), _case("C", "C sits by", "Oslo"),
            _case("D", "D lies at", "Bern")]
    model = _Model({"in": "Paris", "near": "Rome", "by": "Lima", "at": "Bern"})  # C answered wrongly
    retain = [{"prompt": c.request["prompt"], "subject": c.request["subject"]} for c in pool]
    assert _known_retain(surgical, model, retain, pool, monkeypatch) == [retain[0], retain[1], retain[3]]
    assert _known_retain(surgical, model, retain[::-1], pool, monkeypatch) == [retain[3], retain[1], retain[0]]
