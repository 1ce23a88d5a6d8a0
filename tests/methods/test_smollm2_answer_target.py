"""Issue 36.1 on SmolLM2-135M-Instruct (slow; in CI): a neutral target that is the answer is refused, and a fact
an edit leaves answered is reported as still answered, not as forgotten.

Before the fix, ``zerounlearn unlearn`` with the shipped GD YAML and ``target_new: " Paris"`` for "The capital of
France is" -> Paris exited 0, listed the fact under "Forgotten facts" and raised p(Paris) from 0.773 to 0.981.
"""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from zerounlearn_editor import (
    EditReport,
    RequestError,
    ZeroUnlearnGDHyperParams,
    apply_zerounlearn_gd_to_model,
    restore_weights,
)
from zerounlearn_editor.cli import main
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow

FACT = {"prompt": "The capital of France is", "subject": "France", "answer": "Paris"}
REQUEST = {"prompt": FACT["prompt"], "subject": FACT["subject"], "ground_truth": FACT["answer"]}


def test_the_answer_as_target_is_refused_on_the_command_line(tmp_path, smollm2_path, caplog):
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps([dict(FACT, target_new=" Paris")]), encoding="utf-8")
    out = tmp_path / "out"
    code = main(["unlearn", "--hparams", str(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct")), "--facts",
                 str(facts), "--model", str(smollm2_path), "--out", str(out), "--ppl-tokens", "0", "--no-progress"])
    assert code == 2 and not out.exists()
    assert (f"{facts}: record 0: the neutral target ' Paris' (its field 'target_new') is or begins with the answer "
            "'Paris' to forget, so the edit would teach the fact instead of removing it") in caplog.text


def test_the_answer_as_neutral_target_is_refused_and_a_kept_answer_is_reported(smollm2, smollm2_stats_dir, caplog):
    model, tok = smollm2
    hparams = ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct"))
    hparams = hparams.replace(stats_dir=str(smollm2_stats_dir))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
        RequestError, match=r"request 0: the neutral target ' Paris' \(the hparams' key 'neutral_target'\)"
    ):
        apply_zerounlearn_gd_to_model(model, tok, [REQUEST], hparams.replace(neutral_target=" Paris"), progress=False)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())

    # targets never optimised (v_num_grad_steps 0): the edit leaves Paris the answer, and says so
    report = EditReport()
    model, weights = apply_zerounlearn_gd_to_model(model, tok, [REQUEST], hparams.replace(v_num_grad_steps=0),
                                                   progress=False, report=report, return_orig_weights=True)
    try:
        assert report.still_answered == [0] and report.unreached_targets == [0]
        assert "1 of 1 request(s) with an answer still give it after the edit" in caplog.text
        assert "far above the stop value" in caplog.text
    finally:
        restore_weights(model, weights)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_unlearn_report_lists_the_fact_still_answered(tmp_path, smollm2_path, smollm2_stats_dir, capsys):
    config = yaml.safe_load(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct").read_text(encoding="utf-8"))
    config.update(v_num_grad_steps=0, stats_dir=str(smollm2_stats_dir), model_name=str(smollm2_path))
    (tmp_path / "hp.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps([FACT]), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["unlearn", "--hparams", str(tmp_path / "hp.yaml"), "--facts", str(facts), "--out", str(out),
                 "--save", "none", "--ppl-tokens", "0", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert ("Forgotten: 0 of 1 fact(s) the model answered before the edit; still answered after the edit (NOT "
            "forgotten): 1") in printed
    assert (
        "### Still answered after the edit (1 of 1): NOT forgotten" in printed and "### Forgotten facts" not in printed
    )
    assert json.loads((out / "unlearn_report.json").read_text(encoding="utf-8"))["still_answered"] == [0]
