"""``zerounlearn unlearn --audit`` on a tiny Llama saved to disk: the audit table and report, and bad probe fields."""
from __future__ import annotations

import json

import pytest
import yaml

from tiny_models import CORPUS, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor.applications.unlearn import REPORT_NAME, load_facts
from zerounlearn_editor.cli import main

FACTS = [
    {"prompt": "the capital of france is", "subject": "france", "answer": "paris",
     "paraphrases": ["the capital city of france is"], "questions": ["which city is the capital of france ?"]},
    {"prompt": "the capital of germany is", "subject": "germany", "answer": "berlin"},
    {"prompt": "the capital of japan is", "subject": "japan"},
]


def test_unlearn_audit_reports_every_probe_before_and_after(tmp_path, capsys):
    tok = tiny_tokenizer()
    model_dir = tmp_path / "tiny-model"
    tiny_llama(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    (tmp_path / "ppl.txt").write_text(" ".join(CORPUS), encoding="utf-8")
    (tmp_path / "facts.json").write_text(json.dumps(FACTS), encoding="utf-8")
    hparams = tmp_path / "gd.yaml"
    hparams.write_text(yaml.safe_dump(tiny_hparams_dict(tmp_path / "stats", corpus, alg_name="ZeroUnlearn-GD",
                                                        model_name=str(model_dir))), encoding="utf-8")
    out = tmp_path / "out"
    code = main(
        [
            "unlearn",
            "--hparams",
            str(hparams),
            "--facts",
            str(tmp_path / "facts.json"),
            "--out",
            str(out),
            "--save",
            "none",
            "--ppl-tokens",
            "0",
            "--no-progress",
            "--audit",
            "--audit-probes",
            "formats,in_context,choice,lens,relearning",
            "--audit-relearn-steps",
            "1",
            "--audit-relearn-scopes",
            "mlp",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "### Robustness audit" in table and "| relearn-mlp |" in table and "| ic3 |" in table
    report = json.loads((out / REPORT_NAME).read_text())
    audit = report["audit"]
    assert list(audit["before"]) == list(audit["after"])
    assert {"prompt", "paraphrase", "question", "ic1", "mc", "lens:prompt", "relearn-mlp", "generic-mlp"} <= set(
        audit["before"]
    )
    # two facts have answers; only the first has a paraphrase
    assert audit["before"]["prompt"]["n"] == 2 and audit["before"]["paraphrase"]["n_probed"] == 1
    # borrowed facts (built-in hand-written facts) never name a forgotten subject or answer
    for examples in audit["plan"]["in_context"]["3"]:
        assert all("France" not in e and "Paris" not in e and "Berlin" not in e for e in examples)


@pytest.mark.parametrize("value", ['"a b"', '[""]', "[3]"])
def test_bad_probe_fields_are_named(tmp_path, value):
    path = tmp_path / "facts.json"
    path.write_text(f'[{{"prompt": "a b", "subject": "a", "answer": "x", "paraphrases": {value}}}]', encoding="utf-8")
    with pytest.raises(ValueError, match=r"record 0: field 'paraphrases' must be a list of non-empty strings"):
        load_facts(path)


def test_audit_without_answers_is_refused_before_loading(tmp_path, caplog):
    path = tmp_path / "facts.json"
    path.write_text('[{"prompt": "the capital of japan is", "subject": "japan"}]', encoding="utf-8")
    hparams = tmp_path / "gd.yaml"
    hparams.write_text(
        yaml.safe_dump(
            tiny_hparams_dict(
                tmp_path / "stats",
                tmp_path / "c.jsonl",
                alg_name="ZeroUnlearn-GD",
                model_name=str(tmp_path / "no-such-model"),
            )
        ),
        encoding="utf-8",
    )
    assert main(["unlearn", "--hparams", str(hparams), "--facts", str(path), "--save", "none", "--audit"]) == 2
    assert "--audit needs facts with an 'answer'" in caplog.text
