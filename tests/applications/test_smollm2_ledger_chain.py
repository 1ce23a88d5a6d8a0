"""Issue 46 on SmolLM2 (slow): three chained ``unlearn --model`` runs (A = France, Germany; B = Japan, Italy; C =
Spain, Greece, England), with the paper's ``hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml``: the final ledger's
status of every fact agrees with greedy decoding on the final model, fact by fact (a fact the model gives, as its
next tokens or later in the 8-token continuation, is never "forgotten"). Measured (one thread): with the paper YAML
the third edit brings Japan back (" Tokyo."; France too without England in C) and is refused until
``--allow-came-back``; it leaves Greece answered ("still answered") and teaches England ("taught": not answered
before it, " London." after). ``-many.yaml`` chains (no earlier fact comes back in five runs) are measured, not
tested here, to keep the suite short: ``benchmarks/RESULTS.md`` §13, ``benchmarks/ledger_chain.py``."""
from __future__ import annotations

import json
import logging
import re

import pytest
import yaml

from zerounlearn_editor.applications.fact_status import ANSWERED_STATUSES
from zerounlearn_editor.applications.ledger import LEDGER_NAME
from zerounlearn_editor.cli import main
from zerounlearn_editor.evaluation.generation import generate_greedy
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow

CAPITALS = {"A": [("France", "Paris"), ("Germany", "Berlin")], "B": [("Japan", "Tokyo"), ("Italy", "Rome")],
            "C": [("Spain", "Madrid"), ("Greece", "Athens"), ("England", "London")]}


def test_three_chained_edits_record_what_greedy_decoding_gives(smollm2_path, smollm2_stats_dir, tmp_path, caplog):
    config = yaml.safe_load(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct").read_text())
    # the fluency guard only reads (the edit is the YAML's either way): off, to keep the three edits short
    config.update(stats_dir=str(smollm2_stats_dir), model_name=str(smollm2_path), fluency_max_increase=None)
    hparams = tmp_path / "hp.yaml"
    hparams.write_text(yaml.safe_dump(config), encoding="utf-8")
    for key, pairs in CAPITALS.items():
        facts = [{"prompt": f"The capital of {c} is", "subject": c, "answer": a} for c, a in pairs]
        (tmp_path / f"{key}.json").write_text(json.dumps(facts), encoding="utf-8")
    caplog.set_level(logging.WARNING)
    folder, refused = None, []
    for key in CAPITALS:
        out = tmp_path / key
        args = ["unlearn", "--hparams", str(hparams), "--facts", str(tmp_path / f"{key}.json"), "--out", str(out),
                "--save", "model", "--ppl-tokens", "0", "--no-progress"] + (["--model", str(folder)] if folder else [])
        rc = main(args)
        if rc == 2:  # an earlier fact came back: refused, nothing written
            assert "--allow-came-back" in caplog.text and not out.exists(), caplog.text
            refused.append(key)
            rc = main(args + ["--allow-came-back"])
        assert rc == 0
        folder = out
    ledger = json.loads((folder / LEDGER_NAME).read_text(encoding="utf-8"))
    assert [f["subject"] for f in ledger["facts"]] == [c for pairs in CAPITALS.values() for c, _ in pairs]
    model, tok = load_model_and_tokenizer(str(folder))
    greedy = generate_greedy(model, tok, [f["prompt"] for f in ledger["facts"]], 8)  # the report's 8 tokens
    statuses = {f["subject"]: (f["status"], text) for f, text in zip(ledger["facts"], greedy)}
    logging.getLogger(__name__).info("%s: refused %s; final statuses %s", hparams.name, refused, statuses)
    for fact, text in zip(ledger["facts"], greedy):
        gives = re.search(rf"\b{re.escape(fact['answer'])}\b", text, flags=re.IGNORECASE) is not None  # named
        assert fact["answered"] is gives and (fact["status"] in ANSWERED_STATUSES) is gives, (fact, text)
        assert fact["as_of_edit"] == 2
    # item 4: B's facts were no longer answered after A (collateral): nothing to forget, not "forgotten"
    assert ledger["facts"][3]["answered_before"] is False and statuses["Italy"][0] == "not_known", statuses
    came_back = [f["subject"] for f in ledger["facts"] if f["status"] == "came_back"]
    assert (refused == ["C"]) is bool(came_back), (refused, came_back)
    # item 3: the paper's third edit leaves Greece answered and teaches England (not answered before it)
    assert statuses["Greece"][0] == "still_answered" and statuses["England"][0] == "taught", statuses
