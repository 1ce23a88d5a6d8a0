"""``run_unlearn`` reads each input file once and checks each input once (issue 47, item 3): the facts, retain, hparams,
perplexity-text and ledger files are opened once per run (a counting opener), the edit's checks
(``check_edit_inputs``, ``normalize_requests``) run once per edit, and the ``answer`` / ``ground_truth`` alias is
resolved by one function."""
from __future__ import annotations

import builtins
import collections
import io
import json
import os
from pathlib import Path

import pytest
import yaml

from tiny_models import CORPUS, saved_tiny_llama, tiny_hparams_dict
from zerounlearn_editor.applications import unlearn
from zerounlearn_editor.applications.unlearn import UnlearnSettings, run_unlearn
from zerounlearn_editor.engine import pipeline, requests, retain
from zerounlearn_editor.methods.zerounlearn import method as zerounlearn_method

FACTS = [{"prompt": "the capital of france is", "subject": "france", "answer": "paris",
          "paraphrases": ["the capital city of france is"]},
         {"prompt": "the capital of germany is", "subject": "germany", "ground_truth": "berlin"},
         {"prompt": "the capital of japan is", "subject": "japan"}]
MORE_FACTS = [{"prompt": "the capital of italy is", "subject": "italy", "answer": "rome"}]
RETAIN = [{"prompt": "the capital of spain is", "subject": "spain", "answer": "madrid"},
          {"prompt": "the capital of egypt is", "subject": "egypt", "ground_truth": "cairo"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("reads_once")
    model_dir, corpus = saved_tiny_llama(root)
    (root / "ppl.txt").write_text(" ".join(CORPUS), encoding="utf-8")
    for name, records in (("facts.json", FACTS), ("more.json", MORE_FACTS), ("retain.json", RETAIN)):
        (root / name).write_text(json.dumps(records), encoding="utf-8")
    for alg, extra in (("ZeroUnlearn", {}), ("ZeroUnlearn-GD", {"retain_nullspace_weight": 1.0})):
        config = tiny_hparams_dict(root / "stats", corpus, alg_name=alg, model_name=str(model_dir),
                                   fluency_max_increase=None, **extra)
        (root / f"{alg}.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return root


@pytest.fixture
def opened(monkeypatch):
    """Every file opened for reading through ``open`` / ``io.open`` / ``Path.open`` (``Path.read_text`` and
    ``read_bytes`` go through it): ``{resolved path: count}``."""
    counts: collections.Counter = collections.Counter()
    real_open = io.open

    def counting_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and not any(flag in mode for flag in "wax+"):
            counts[Path(file).resolve()] += 1
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(builtins, "open", counting_open)
    return counts


def _settings(**changes) -> UnlearnSettings:
    return UnlearnSettings(**dict(dict(save="model", progress=False, ppl_tokens=40), **changes))


def test_run_unlearn_opens_each_input_file_once(files, tmp_path, opened):
    root = files
    inputs = {name: (root / name).resolve() for name in ("ZeroUnlearn-GD.yaml", "facts.json", "retain.json", "ppl.txt")}
    first = tmp_path / "first"
    result = run_unlearn(root / "ZeroUnlearn-GD.yaml", root / "facts.json", first, root / "retain.json",
                         settings=_settings(ppl_text=root / "ppl.txt"))
    assert len(result.forgotten) == 3 and len(result.kept) == 2 and result.ppl_before is not None
    assert {name: opened[path] for name, path in inputs.items()} == dict.fromkeys(inputs, 1)

    # a continued run: the ledger of the folder it continues is read once too
    opened.clear()
    run_unlearn(root / "ZeroUnlearn-GD.yaml", root / "more.json", tmp_path / "second", model_name=str(first),
                settings=_settings(ppl_tokens=0))
    ledger = (first / unlearn.LEDGER_NAME).resolve()
    assert (opened[(root / "ZeroUnlearn-GD.yaml").resolve()], opened[(root / "more.json").resolve()],
            opened[ledger]) == (1, 1, 1)


def test_run_unlearn_with_the_audit_reads_the_facts_file_once(files, tmp_path, opened):
    from zerounlearn_editor.evaluation.audit import AuditSettings

    root = files
    audit = AuditSettings(families=("formats",), shots=(1,))
    result = run_unlearn(root / "ZeroUnlearn-GD.yaml", root / "facts.json", tmp_path / "out", root / "retain.json",
                         settings=_settings(save="none", ppl_tokens=0, audit=audit))
    assert result.audit["before"]["prompt"]["n"] == 2  # the two facts with an answer (either field name)
    assert result.audit["before"]["paraphrase"]["n_probed"] == 1
    assert opened[(root / "facts.json").resolve()] == 1 and opened[(root / "retain.json").resolve()] == 1


def _spy(monkeypatch, name, modules):
    """Replace ``name`` in each of ``modules`` (the module defining it first; a module that does not import it gets
    the spy too, unused) by one spy; returns its list of calls."""
    calls = []
    real = getattr(modules[0], name)

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    for module in modules:
        monkeypatch.setattr(module, name, spy, raising=False)
    return calls


@pytest.mark.parametrize("alg", ["ZeroUnlearn", "ZeroUnlearn-GD"])
def test_the_edit_checks_its_inputs_once(files, tmp_path, monkeypatch, alg):
    root = files
    checks = _spy(monkeypatch, "check_edit_inputs", [pipeline, unlearn, zerounlearn_method])
    normalized = _spy(monkeypatch, "normalize_requests", [requests, pipeline, retain, unlearn])
    retain_file = root / "retain.json" if alg == "ZeroUnlearn-GD" else None
    result = run_unlearn(root / f"{alg}.yaml", root / "facts.json", None, retain_file,
                         settings=_settings(save="none", ppl_tokens=0))
    assert len(result.forgotten) == 3
    assert len(checks) == 1
    # the facts once, the retain facts once
    assert len(normalized) == (2 if retain_file else 1)


def test_the_answer_alias_is_resolved_by_one_function(files, tmp_path, monkeypatch):
    """Every reader of an ``answer`` / ``ground_truth`` field (the facts, the retain facts, the audit's pool) goes
    through :func:`zerounlearn_editor.data.fact_records.answer_of`."""
    from zerounlearn_editor.data import fact_records
    from zerounlearn_editor.evaluation.audit import AuditSettings

    seen = []
    real = fact_records.answer_of
    monkeypatch.setattr(fact_records, "answer_of", lambda record: seen.append(record["prompt"]) or real(record))
    root = files
    run_unlearn(root / "ZeroUnlearn-GD.yaml", root / "facts.json", None, root / "retain.json",
                settings=_settings(save="none", ppl_tokens=0, audit=AuditSettings(families=("formats",), shots=(1,))))
    # each record of the facts file and of the retain file once, at the boundary
    assert sorted(seen) == sorted([f["prompt"] for f in FACTS] + [r["prompt"] for r in RETAIN])


def test_the_audit_probes_each_edited_fact_once_when_the_file_repeats_one(files, tmp_path):
    """A repeated fact is edited once, and the audit's items are the edited facts' (they were the file's records by
    their index in the file, so a repeat shifted them: [A, A, B] audited A twice)."""
    from zerounlearn_editor.evaluation.audit import AuditSettings

    root = files
    facts = tmp_path / "repeats.json"
    facts.write_text(json.dumps([FACTS[0], FACTS[0], FACTS[1], FACTS[2]]), encoding="utf-8")
    result = run_unlearn(root / "ZeroUnlearn-GD.yaml", facts, None,
                         settings=_settings(save="none", ppl_tokens=0,
                                            audit=AuditSettings(families=("formats",), shots=(1,))))
    assert [row.prompt for row in result.forgotten] == [f["prompt"] for f in FACTS]
    assert result.audit["plan"]["n_items"] == 2 and result.audit["before"]["prompt"]["n"] == 2
