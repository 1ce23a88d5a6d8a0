"""The diagnosis of issue 45 item 1 on a tiny model: it agrees with the audit's own mc, its relearning splices are
the states they name, its edits are cached by key, and the model is left as it was given."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from tiny_models import tiny_llama, tiny_tokenizer
from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.evaluation.audit import AuditSettings, build_plan, items_from_facts, pool_from_facts
from zerounlearn_editor.evaluation.audit.quantize import quantize_rtn
from zerounlearn_editor.evaluation.audit.suite import score_model
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.harness.forgotten_diagnosis import DiagnosisInputs, layer_of, run_diagnosis
from zerounlearn_editor.harness.forgotten_edits import applied, cached_edit, edit_key
from zerounlearn_editor.harness.method_specs import EditOutcome, PreparedMethod
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint

FORGET = [{"prompt": "the capital of france is", "subject": "france", "answer": "paris"},
          {"prompt": "the capital of italy is", "subject": "italy", "answer": "rome"}]
POOL = [(f"the capital of {s} is", s, a) for s, a in
        [("germany", "berlin"), ("spain", "madrid"), ("japan", "tokyo"), ("egypt", "cairo"), ("england", "london")]]
WEIGHT = "model.layers.2.mlp.down_proj.weight"


def _inputs(tok, model, edited_layers):
    settings = AuditSettings(families=("choice", "relearning"), relearn_n=4, relearn_steps=2, relearn_lr=1e-2,
                             batch_size=4, seed=1)
    plan = build_plan(items_from_facts(FORGET), pool_from_facts(POOL), tok, settings, ["many people live in london"])
    torch.manual_seed(0)
    weight = dict(model.named_parameters())[WEIGHT]
    edit = {WEIGHT: weight.detach() + 0.5 * torch.randn_like(weight)}
    requests = [{"prompt": f["prompt"], "subject": f["subject"], "ground_truth": f["answer"]} for f in FORGET]
    return DiagnosisInputs(plan=plan, settings=settings, requests=requests, edits={"edit": edit},
                           layer_module_tmp="model.layers.{}", ln_f_module="model.norm", fact_token="subject_last",
                           edited_layers=edited_layers, batch_size=3)


def test_diagnosis_matches_the_audit_and_leaves_the_model_alone():
    tok = tiny_tokenizer()
    model = tiny_llama(tok).eval()
    before = ModelFingerprint.of(model)
    inputs = _inputs(tok, model, [0, 1, 2, 3])
    result = run_diagnosis(model, tok, inputs)
    assert before.differences(model) == []
    audit_base = score_model(model, tok, inputs.plan, inputs.settings)["mc"]["recovered"]
    with applied(model, inputs.edits["edit"]):
        audit_edit = score_model(model, tok, inputs.plan, inputs.settings)["mc"]["recovered"]
    assert result["rows"]["base"]["mc"]["win_pct"] == audit_base
    assert result["rows"]["edit"]["mc"]["win_pct"] == audit_edit
    for row in result["rows"].values():
        mc = row["mc"]
        assert len(mc["lens_win_pct_per_layer"]) == 4
        # the lens after the last layer is the model's own next-token ranking: the first token's win at the output
        assert mc["lens_win_pct_per_layer"][-1] == mc["first_token_win_pct"]
        reads = row["relearn"]["reads"]
        # every layer is an edited layer here: undoing the fine-tune there is no fine-tune; keeping it only there
        # is the whole fine-tune
        assert reads["undo in edited layers"] == reads["before fine-tune"]
        assert reads["only in edited layers"] == reads["fine-tuned"]
        assert row["relearn"]["relative_change_per_layer"]["down_proj"][2] > 0
    int4 = result["rows"]["edit"]["int4"][WEIGHT]
    assert 0.0 <= int4["frac_below_half_step"] <= 1.0 and int4["median_edit_effect"] > 0
    # int4 only in the edited weight = the edited model with that one matrix rounded, built here by hand
    edited = dict(inputs.edits["edit"])
    rounded = {WEIGHT: quantize_rtn(edited[WEIGHT], 4, 16)}
    with applied(model, edited), applied(model, rounded):
        by_hand = evaluate_probes(model, tok, [Probe(f["prompt"], f["answer"]) for f in FORGET])
    reads = result["rows"]["edit"]["int4_reads"]
    expected_logp = sum(n * math.log(p) for p, n in zip(by_hand["prob"], by_hand["n_tokens"])) / len(FORGET)
    assert reads["int4 only in edited weights"]["mean_answer_logp"] == pytest.approx(expected_logp, abs=1e-4)
    assert reads["int4 everywhere"] != reads["int4 only in edited weights"]


def test_cached_edit_is_read_back_by_key(tmp_path: Path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok).eval()
    before = ModelFingerprint.of(model)
    calls = []

    def edit(m, t, requests, bank):
        calls.append(len(requests))
        param = dict(m.named_parameters())[WEIGHT]
        saved = {WEIGHT: param.detach().clone()}
        with torch.no_grad():
            param.add_(1.0)
        return EditOutcome(saved)

    method = PreparedMethod("fake", edit=edit)
    path = tmp_path / "edits" / "fake.safetensors"
    first = cached_edit(method, model, tok, [{"prompt": "a"}], {}, path, "key-1")
    assert before.differences(model) == [] and calls == [1]
    original = dict(model.named_parameters())[WEIGHT]
    assert torch.equal(first[WEIGHT], original + 1.0)
    again = cached_edit(method, model, tok, [{"prompt": "a"}], {}, path, "key-1")
    assert calls == [1] and torch.equal(again[WEIGHT], first[WEIGHT])
    cached_edit(method, model, tok, [{"prompt": "a"}, {"prompt": "b"}], {}, path, "key-2")
    assert calls == [1, 2]
    assert layer_of(WEIGHT) == 2


def test_int4_per_channel_reads_per_weight_and_margins():
    tok = tiny_tokenizer()
    model = tiny_llama(tok).eval()
    inputs = dataclasses.replace(_inputs(tok, model, [2]), quant=(4, None), parts=("int4",))
    result = run_diagnosis(model, tok, inputs)
    row = result["rows"]["edit"]
    assert set(row) == {"int4", "int4_reads"} and result["quant"] == {"bits": 4, "group_size": None}
    reads = row["int4_reads"]
    # one edited weight: quantizing only it (per channel, rounded by hand here) is "only in L2"
    edited = dict(inputs.edits["edit"])
    rounded = {WEIGHT: quantize_rtn(edited[WEIGHT], 4, None)}
    with applied(model, edited), applied(model, rounded):
        by_hand = evaluate_probes(model, tok, [Probe(f["prompt"], f["answer"]) for f in FORGET])
    expected_logp = sum(n * math.log(p) for p, n in zip(by_hand["prob"], by_hand["n_tokens"])) / len(FORGET)
    assert reads["int4 only in L2"]["mean_answer_logp"] == pytest.approx(expected_logp, abs=1e-4)
    assert reads["int4 only in L2"]["mean_answer_logp"] == reads["int4 only in edited weights"]["mean_answer_logp"]
    assert reads["int4 everywhere but L2"]["mean_answer_logp"] == pytest.approx(
        reads["int4 everywhere but the edited weights"]["mean_answer_logp"])
    # layers 0-1 / 3 are the regions before / after the edited layer 2; layer 2's other weights are the third
    assert {"int4 only before L2", "int4 only in L2-2 but the edited weights", "int4 only after L2"} <= set(reads)
    # per-channel steps differ from groups of 16: the rounded copy differs from the g16 one
    assert not torch.equal(rounded[WEIGHT], quantize_rtn(edited[WEIGHT], 4, 16))
    # the output margin is positive exactly where the answer's first token is the greedy next token
    for label in ("unquantized", "int4 everywhere"):
        read = reads[label]
        assert len(read["margins"]) == len(FORGET)
        assert [int(m > 0) for m in read["margins"]] == read["recovered"]
    prompt_ids = tok(FORGET[0]["prompt"])["input_ids"]
    with applied(model, edited), torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
    answer = tok(FORGET[0]["prompt"] + " " + FORGET[0]["answer"])["input_ids"][len(prompt_ids)]
    top_other = torch.cat([logits[:answer], logits[answer + 1:]]).max()
    assert reads["unquantized"]["margins"][0] == pytest.approx(float(logits[answer] - top_other), abs=1e-4)
    assert len(row["int4"][WEIGHT]["effect_over_error"]) == len(FORGET)
    with pytest.raises(ValueError, match="parts"):
        run_diagnosis(model, tok, dataclasses.replace(inputs, parts=("int8",)))


def test_cached_edit_gives_the_retain_set_and_keys_it(tmp_path: Path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok).eval()
    seen = []

    def edit(m, t, requests, bank, retain=None):
        seen.append(retain)
        param = dict(m.named_parameters())[WEIGHT]
        saved = {WEIGHT: param.detach().clone()}
        with torch.no_grad():
            param.add_(1.0)
        return EditOutcome(saved)

    method = PreparedMethod("fake+R", edit=edit, uses_retain=True)
    path = tmp_path / "fake.safetensors"
    with pytest.raises(ValueError, match="retain"):
        cached_edit(method, model, tok, [{"prompt": "a"}], {}, path, "k")
    retain = [{"prompt": "b is", "subject": "b"}]
    cached_edit(method, model, tok, [{"prompt": "a"}], {}, path, "k", retain)
    assert seen == [retain]
    assert edit_key("sig", ["1"], "fp", retain) != edit_key("sig", ["1"], "fp")
    assert edit_key("sig", ["1"], "fp", []) == edit_key("sig", ["1"], "fp")
