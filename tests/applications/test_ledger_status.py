"""Issue 46 (items 1-4, 7, 8) on a tiny Llama trained on a toy world (``arch_zoo``): the ledger of ``unlearn
--save model`` records each fact's status as of the latest edit (forgotten only when it was answered before its
edit and is not answered now), a continued run re-scores the earlier facts and refuses an edit that brings one back
(unless ``--allow-came-back``), a folder whose ledger went missing and an ``--out`` holding a ledger this run does
not continue are refused, and a repeated fact is edited once and listed once."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml

from arch_zoo import FACTS, trained_model, write_c0_corpus
from tiny_models import tiny_hparams_dict
from zerounlearn_editor.applications.ledger import LEDGER_NAME
from zerounlearn_editor.applications.unlearn import REPORT_NAME
from zerounlearn_editor.cli import main

KNOWN = {"prompt": FACTS[0][0], "subject": FACTS[0][1], "answer": FACTS[0][2]}  # the capital of japan -> tokyo
UNKNOWN = {"prompt": "the capital of france", "subject": "france", "answer": "london"}  # the model says "is"
NO_ANSWER = {"prompt": FACTS[2][0], "subject": FACTS[2][1]}
# the same prompt and key (fact_token: last) sent to the known answer: brings KNOWN back after it was forgotten
BRING_BACK = {"prompt": FACTS[0][0], "subject": "capital", "target_new": " " + FACTS[0][2]}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The trained tiny model in a folder, a GD YAML whose targets are reached, and a first ``--save model`` run
    of a known fact, an unknown one and one without an answer."""
    root = tmp_path_factory.mktemp("ledger-status")
    model, tok = trained_model("llama")
    base = root / "base"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    corpus = write_c0_corpus(root / "c0.jsonl")
    config = tiny_hparams_dict(root / "stats", corpus, alg_name="ZeroUnlearn-GD", model_name=str(base),
                               fact_token="last", v_lr=0.5, v_weight_decay=1e-3, clamp_norm_factor=4.0,
                               v_num_grad_steps=50, fluency_max_increase=None)
    (root / "gd.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    for name, facts in (("first.json", [KNOWN, UNKNOWN, NO_ANSWER]), ("back.json", [BRING_BACK])):
        (root / name).write_text(json.dumps(facts), encoding="utf-8")
    first = root / "first"
    assert _run(root, "first.json", "--out", str(first)) == 0
    return root, first


def _run(root: Path, facts: str, *extra: str) -> int:
    return main(["unlearn", "--hparams", str(root / "gd.yaml"), "--facts", str(root / facts), "--save", "model",
                 "--ppl-tokens", "0", "--no-progress", *extra])


def _ledger(folder: Path) -> dict:
    return json.loads((folder / LEDGER_NAME).read_text(encoding="utf-8"))


def test_the_headline_and_ledger_separate_forgotten_from_not_known(setup, capsys):
    """Item 4: "Forgotten: 2 of 2" was printed (and the ledger listed all as forgotten) when the model knew 1."""
    root, first = setup
    ledger = _ledger(first)
    assert [f["status"] for f in ledger["facts"]] == ["forgotten", "not_known", "no_answer"]
    assert [f["answered_before"] for f in ledger["facts"]] == [True, False, None]
    assert [f["as_of_edit"] for f in ledger["facts"]] == [0, 0, 0]
    report = json.loads((first / REPORT_NAME).read_text(encoding="utf-8"))
    assert report["statuses"] == ["forgotten", "not_known", "no_answer"]
    assert report["ledger_status"]["forgotten"] == 1 and report["ledger_status"]["not_known"] == 1
    again = root / "first-again"
    assert _run(root, "first.json", "--out", str(again)) == 0
    printed = capsys.readouterr().out
    assert ("Forgotten: 1 of 1 fact(s) the model answered before the edit; not known before the edit (nothing to "
            "forget): 1; no answer given (not scored): 1") in printed
    assert "### Not known before the edit (nothing to forget)" in printed
    assert "Ledger (zerounlearn_ledger.json): 3 fact(s) of 1 edit(s), as of this edit: 1 forgotten, 1 not known" \
        in printed


def test_an_earlier_fact_that_comes_back_is_refused_or_recorded(setup, caplog, capsys):
    """Item 2: a continued edit made the model give a fact the ledger listed as forgotten, and the ledger still
    listed it as forgotten. Refused by default (nothing written); with --allow-came-back kept and marked."""
    root, first = setup
    refused = root / "back-refused"
    assert _run(root, "back.json", "--model", str(first), "--out", str(refused)) == 2
    assert "this edit made the model give 1 fact(s) the ledger of" in caplog.text
    assert f"{KNOWN['prompt']!r}" in caplog.text and "--allow-came-back" in caplog.text
    assert not refused.exists()
    kept = root / "back-kept"
    assert _run(root, "back.json", "--model", str(first), "--out", str(kept), "--allow-came-back") == 0
    printed = capsys.readouterr().out
    assert "CAME BACK: this edit made the model give 1 earlier fact(s) again" in printed
    assert "### Came back: earlier facts the model gives again after this edit (NOT forgotten)" in printed
    ledger = _ledger(kept)
    assert [f["status"] for f in ledger["facts"]] == ["came_back", "not_known", "no_answer", "no_answer"]
    assert ledger["facts"][0]["answered"] is True and ledger["facts"][0]["first_unanswered_edit"] == 0
    assert [f["as_of_edit"] for f in ledger["facts"]] == [1, 1, 1, 1]
    report = json.loads((kept / REPORT_NAME).read_text(encoding="utf-8"))
    assert report["came_back"] == [0] and report["earlier"][0]["status"] == "came_back"
    assert report["earlier"][0]["status_before"] == "forgotten" and report["earlier"][0]["acc_after"] == 1.0


def _no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("zerounlearn_editor.support.model_zoo.load_model_and_tokenizer", refuse)


def test_a_folder_whose_ledger_is_missing_is_refused_before_loading(setup, caplog, monkeypatch):
    """Item 1: without its ledger an unlearn output folder was taken as a fresh base model."""
    root, first = setup
    folder = root / "no-ledger"
    shutil.copytree(first, folder)
    (folder / LEDGER_NAME).unlink()
    _no_model_load(monkeypatch)
    out = root / "out-no-ledger"
    assert _run(root, "back.json", "--model", str(folder), "--out", str(out)) == 2
    assert f"holds {REPORT_NAME} (an unlearn output) but no {LEDGER_NAME}" in caplog.text
    # a folder written before issue 47 also held the retired experiment's state file: a trace too, alone or not
    (folder / "forgotten_state.safetensors").write_bytes(b"state")
    assert _run(root, "back.json", "--model", str(folder), "--out", str(out)) == 2
    assert f"holds {REPORT_NAME} and forgotten_state.safetensors (an unlearn output)" in caplog.text
    (folder / REPORT_NAME).unlink()
    assert _run(root, "back.json", "--model", str(folder), "--out", str(out)) == 2
    assert f"holds forgotten_state.safetensors (an unlearn output) but no {LEDGER_NAME}" in caplog.text
    (folder / LEDGER_NAME).mkdir()
    assert _run(root, "back.json", "--model", str(folder), "--out", str(out)) == 2
    assert f"{folder / LEDGER_NAME}: the ledger path is not a file" in caplog.text
    assert not out.exists()


def test_an_out_folder_holding_another_ledger_is_not_replaced_silently(setup, caplog, monkeypatch):
    """Item 7: ``--out`` holding a ledger that this run does not continue was replaced without a word."""
    root, first = setup
    out = root / "held"
    shutil.copytree(first, out)
    before = (out / LEDGER_NAME).read_bytes()
    with monkeypatch.context() as patched:
        _no_model_load(patched)
        for extra in ([], ["--save", "none"]):
            assert _run(root, "back.json", "--out", str(out), *extra) == 2
            assert f"--out {out} holds a ledger ({LEDGER_NAME}, 3 fact(s) of 1 edit(s)) that this run does not " \
                   "continue (it starts from a base model)" in caplog.text
            assert "--replace-ledger" in caplog.text and (out / LEDGER_NAME).read_bytes() == before
    caplog.clear()
    caplog.set_level(logging.WARNING)
    assert _run(root, "back.json", "--out", str(out), "--replace-ledger") == 0
    assert "replacing it (--replace-ledger)" in caplog.text
    assert [f["prompt"] for f in _ledger(out)["facts"]] == [BRING_BACK["prompt"]]


def test_a_repeated_fact_is_edited_once_and_listed_once(setup, caplog):
    """Item 8: a fact twice in the facts file made every save fail after the edit; the same facts again on a
    continued folder were listed twice without a word."""
    root, first = setup
    (root / "twice.json").write_text(json.dumps([KNOWN, UNKNOWN, KNOWN]), encoding="utf-8")
    caplog.set_level(logging.WARNING)
    twice = root / "twice"
    assert _run(root, "twice.json", "--out", str(twice)) == 0
    assert "1 repeated fact(s) dropped, each edited once: record 2 (= record 0)" in caplog.text
    assert [f["prompt"] for f in _ledger(twice)["facts"]] == [KNOWN["prompt"], UNKNOWN["prompt"]]
    (root / "conflict.json").write_text(json.dumps([KNOWN, dict(KNOWN, answer="kyoto")]), encoding="utf-8")
    assert _run(root, "conflict.json", "--out", str(root / "conflict")) == 2
    assert "record 1: same prompt and subject as record 0 but another answer ('kyoto' vs 'tokyo')" in caplog.text

    again = root / "again"
    assert _run(root, "first.json", "--model", str(first), "--out", str(again)) == 0
    assert "3 fact(s) the ledger of" in caplog.text and "are edited again" in caplog.text
    ledger = _ledger(again)
    assert [f["prompt"] for f in ledger["facts"]] == [KNOWN["prompt"], UNKNOWN["prompt"], NO_ANSWER["prompt"]]
    assert [f["edits"] for f in ledger["facts"]] == [[0, 1]] * 3 and len(ledger["edits"]) == 2
    # KNOWN, forgotten by edit 0 and not answered before edit 1, is still "forgotten" (answered before its first edit)
    assert [f["status"] for f in ledger["facts"]] == ["forgotten", "not_known", "no_answer"]
    assert _run(root, "back.json", "--model", str(again), "--out", str(root / "again-2"), "--allow-came-back") == 0


def test_a_fact_the_continuation_still_names_is_not_forgotten(setup, monkeypatch):
    """The edit removes the known fact's answer as the next token, but the model names it a line later (Gemma's
    ``":\\n\\n* French"``): the run and the ledger record it still answered, never forgotten; a continuation that
    names another word leaves the unknown fact not known."""
    import zerounlearn_editor.applications.unlearn as unlearn_module

    root, _ = setup
    monkeypatch.setattr(unlearn_module, "generate_greedy",
                        lambda model, tok, prompts, *args, **kwargs: [":\n\n* Tokyo" for _ in prompts])
    out = root / "named-later"
    assert _run(root, "first.json", "--out", str(out)) == 0
    report = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    assert report["forgotten"][0]["acc_after"] < 1.0  # the edit removed the answer as the next tokens
    assert report["statuses"] == ["still_answered", "not_known", "no_answer"]
    assert report["still_answered"] == [0]
    assert [f["status"] for f in _ledger(out)["facts"]] == ["still_answered", "not_known", "no_answer"]


def _continue_with_the_answer_named(root: Path, folder: Path, out: Path, monkeypatch) -> int:
    """Continue ``folder`` with an edit of a fact without an answer while every greedy continuation names the
    known fact's answer (its tokens are not greedy: it was forgotten by the first edit)."""
    import zerounlearn_editor.applications.unlearn as unlearn_module

    monkeypatch.setattr(unlearn_module, "generate_greedy",
                        lambda model, tok, prompts, *args, **kwargs: [":\n\n* Tokyo" for _ in prompts])
    (root / "other.json").write_text(json.dumps([NO_ANSWER]), encoding="utf-8")
    return _run(root, "other.json", "--model", str(folder), "--out", str(out))


def test_a_ledger_of_the_older_rule_does_not_blame_this_edit_for_the_new_rule(setup, monkeypatch, caplog):
    """The known fact is forgotten (its tokens no longer greedy). A later edit leaves it named in the continuation:
    under this version's rule it is answered again (came back, refused), but a ledger written under the older rule
    (answer tokens only, no ``answered_rule``) did not count a named answer, so that change is not refused as the
    new edit's doing; the ledger marks it came_back (never forgotten) either way and records the rule it used."""
    from zerounlearn_editor.applications.fact_status import ANSWERED_RULE
    from zerounlearn_editor.applications.ledger import ledger_hash

    root, first = setup
    assert _ledger(first)["answered_rule"] == ANSWERED_RULE
    caplog.set_level(logging.WARNING)
    assert _continue_with_the_answer_named(root, first, root / "named-new", monkeypatch) == 2  # came back: refused
    older = root / "older-rule"
    shutil.copytree(first, older)
    ledger = _ledger(older)
    del ledger["answered_rule"]
    ledger["ledger_sha256"] = ledger_hash(ledger)
    (older / LEDGER_NAME).write_text(json.dumps(ledger, indent=1), encoding="utf-8")
    caplog.clear()
    assert _continue_with_the_answer_named(root, older, root / "named-older", monkeypatch) == 0
    assert "name their answer in the greedy continuation" in caplog.text
    after = _ledger(root / "named-older")
    assert after["facts"][0]["status"] == "came_back" and after["answered_rule"] == ANSWERED_RULE
