"""benchmarks/surgical.py's ``retain_known`` filter: it keeps exactly the retain requests whose true answer's
first token is the unedited model's top-1 next token (answers looked up in the pool by subject and prompt)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import torch

from zerounlearn_editor.data.types import UnlearnCase

ROOT = Path(__file__).resolve().parents[1]


def _surgical():
    spec = importlib.util.spec_from_file_location("surgical_script", ROOT / "benchmarks" / "surgical.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Tok:
    """Word-level tokenizer: one id per distinct word (leading spaces ignored)."""

    def __init__(self):
        self.vocab = {}

    def _ids(self, text):
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]

    def __call__(self, text, return_tensors=None, add_special_tokens=True):
        ids = ([self.vocab.setdefault("<bos>", len(self.vocab))] if add_special_tokens else []) + self._ids(text)
        return SimpleNamespace(input_ids=torch.tensor([ids]) if return_tensors == "pt" else ids)


class _Model:
    """Next token after a prompt: the id of the word the table names for the prompt's last word."""

    def __init__(self, tok, table):
        self.tok, self.table = tok, table

    def parameters(self):
        return iter([torch.zeros(1)])

    def __call__(self, ids):
        inverse = {v: k for k, v in self.tok.vocab.items()}
        answer = self.tok(self.table[inverse[int(ids[0, -1])]], add_special_tokens=False).input_ids[0]
        logits = torch.zeros(1, ids.shape[1], 64)
        logits[0, -1, answer] = 1.0
        return SimpleNamespace(logits=logits)


def _case(subject, prompt, answer):
    request = {"prompt": prompt, "subject": subject, "ground_truth": answer, "target_new": ""}
    return UnlearnCase(case_id=subject, request=request, forget=[], paraphrase=[], neighbour=[], source="test")


def test_known_retain_keeps_only_answered_records_in_order():
    surgical = _surgical()
    tok = _Tok()
    pool = [_case("A", "A lies in", "Paris"), _case("B", "B lies in", "Rome Italy"), _case("C", "C lies in", "Oslo")]
    # the model answers A with Paris (right), B with Rome (right first token), C with Paris (wrong)
    tok("Paris Rome Oslo in")
    model = _Model(tok, {"in": "Paris"})
    retain = [{"prompt": c.request["prompt"], "subject": c.request["subject"]} for c in pool]
    assert surgical.known_retain(model, tok, retain, pool) == [retain[0]]
    model.table["in"] = "Rome"
    assert surgical.known_retain(model, tok, list(reversed(retain)), pool) == [retain[1]]
    model.table["in"] = "Berlin"
    assert surgical.known_retain(model, tok, retain, pool) == []


def test_known_retain_keeps_several_in_the_given_order():
    surgical = _surgical()
    tok = _Tok()
    pool = [_case("A", "A lies in", "Paris"), _case("B", "B is near", "Rome"), _case("C", "C sits by", "Oslo"),
            _case("D", "D lies at", "Bern")]
    model = _Model(tok, {"in": "Paris", "near": "Rome", "by": "Lima", "at": "Bern"})  # C answered wrongly
    retain = [{"prompt": c.request["prompt"], "subject": c.request["subject"]} for c in pool]
    assert surgical.known_retain(model, tok, retain, pool) == [retain[0], retain[1], retain[3]]
    assert surgical.known_retain(model, tok, retain[::-1], pool) == [retain[3], retain[1], retain[0]]
