"""The deep-forgetting YAML on SmolLM2 (slow; in CI): 3 known CounterFact facts forgotten in one batch.

``hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-deep.yaml`` against the paper's YAML on the same facts and the
same audit plan (:func:`~zerounlearn_editor.evaluation.audit.build_plan`, in-context examples drawn from the
other CounterFact records, never naming a forgotten subject or answer): the deep edit removes the answer from
the prompt too, and the 3-shot prompt brings back fewer facts than after the paper's edit. The facts are the
1st, 3rd and 4th ``case_ids`` of ``tests/fixtures/smollm2_known_counterfact.json`` (the first 10 of the file's first
300 that SmolLM2 answers): of the first five, the 2nd is not given by the unedited model under the 3-shot prompt and
the 5th is left by neither edit under any scored probe, so neither tells the two YAMLs apart and the deep edit's
targets (linear in the facts) cost 40% less without them. The few-shot contexts of the deep mode are the package's
hand-written facts, so the audit's examples are not the ones the edit saw. Only the probes asserted on are scored
(the prompt and the 3-shot prompt, the logit lens on both); the deep edit's targets (13 prefixes, 50 steps per fact)
are most of the test's time.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from tiny_models import FIXTURES
from zerounlearn_editor import ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model, restore_weights
from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.evaluation.audit import (
    AuditSettings,
    LensConfig,
    build_plan,
    items_from_cases,
    pool_from_cases,
    score_model,
)
from zerounlearn_editor.support.resources import hparams_path, shared_file

pytestmark = pytest.mark.slow

FACT_INDICES = (0, 2, 3)
"""Positions in the fixture's ``case_ids`` of the facts forgotten (see the module docstring)."""


def _recovered(model, tok, plan, settings, hp):
    lens = LensConfig(hp.layers[0], hp.layer_module_tmp, hp.ln_f_module)
    scores = score_model(model, tok, plan, settings, lens)
    return {name: scores[name]["recovered"] for name in ("prompt", "ic3", "lens:ic3")}


def test_deep_yaml_forgets_in_context_where_the_paper_yaml_does_not(smollm2, smollm2_stats_dir):
    model, tok = smollm2
    stored = json.loads((FIXTURES / "smollm2_known_counterfact.json").read_text(encoding="utf-8"))
    try:
        cases = load_cases("counterfact-easyedit", path=shared_file(stored["data"]))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    forget = [c for c in cases if c.case_id in {str(stored["case_ids"][i]) for i in FACT_INDICES}]
    assert len(forget) == len(FACT_INDICES)
    settings = AuditSettings(families=("formats", "in_context", "lens"), shots=(3,), seed=0)
    plan = build_plan(items_from_cases(forget), pool_from_cases(cases), tok, settings)
    plan = dataclasses.replace(plan, text_probes={name: plan.text_probes[name] for name in ("prompt", "ic3")})
    requests = [dict(c.request) for c in forget]
    recovered = {}
    for name in ("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct-deep"):
        # the fluency guard only reads (the edit is the YAML's either way; the fifty-fact test keeps it on): off,
        # about 3% of this test
        hp = ZeroUnlearnGDHyperParams.from_hparams(hparams_path("ZeroUnlearn-GD", name)).replace(
            stats_dir=str(smollm2_stats_dir), fluency_max_increase=None)
        if name == "SmolLM2-135M-Instruct":
            recovered["base"] = _recovered(model, tok, plan, settings, hp)
        _, weights = apply_zerounlearn_gd_to_model(model, tok, requests, hp, return_orig_weights=True, progress=False)
        try:
            recovered[name] = _recovered(model, tok, plan, settings, hp)
        finally:
            restore_weights(model, weights)
    base, paper, deep = (recovered[k] for k in ("base", "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct-deep"))
    assert base["prompt"] == 100.0 and base["ic3"] >= 70.0
    # measured on this machine (one thread), facts 1, 3, 4: base prompt / ic3 / lens:ic3 100 / 100 / 100; paper 0 / 33
    # / 100; deep 0 / 0 / 33: the ic3 margin is one fact of three (without the few-shot prefixes deep ic3 is 33 and
    # the test fails; notebook 2026-11-29-suite-time); RESULTS.md "Deep forgetting": n = 40, paired ic3 12 / 0
    assert deep["ic3"] <= 10.0 and deep["ic3"] < paper["ic3"] and deep["lens:ic3"] < paper["lens:ic3"]
    assert deep["prompt"] <= 40.0
