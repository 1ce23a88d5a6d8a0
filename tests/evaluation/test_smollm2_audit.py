"""``zerounlearn audit`` end to end on SmolLM2-135M-Instruct: three capitals, ZeroUnlearn-GD (slow; in CI)."""
from __future__ import annotations

import json

import pytest
import yaml

from zerounlearn_editor.engine.hparams import load_config_file
from zerounlearn_editor.evaluation.audit import AuditSettings
from zerounlearn_editor.harness.audit import AuditConfig, run_audit
from zerounlearn_editor.support.resources import hparams_path

pytestmark = pytest.mark.slow

CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Greece", "Athens"), ("Russia", "Moscow"), ("Portugal", "Lisbon")]


def _records():
    return [{"case_id": i, "subject": c, "prompt": f"The capital of {c} is", "ground_truth": a,
             "rephrase_prompt": f"{c}'s capital city is", "locality_prompt": "The capital of England is",
             "locality_ground_truth": "London"} for i, (c, a) in enumerate(CAPITALS)]


def test_audit_gd_on_three_capitals(smollm2, smollm2_stats_dir, tmp_path):
    model, tok = smollm2
    data = tmp_path / "capitals.json"
    data.write_text(json.dumps(_records()), encoding="utf-8")
    config = load_config_file(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct"))
    config["stats_dir"] = str(smollm2_stats_dir)
    main = tmp_path / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct.yaml"
    main.parent.mkdir(parents=True)
    main.write_text(yaml.safe_dump(config), encoding="utf-8")
    settings = AuditSettings(families=("formats", "in_context", "lens"), shots=(3,))
    summary = run_audit(AuditConfig(hparams=str(main), data=str(data), out=str(tmp_path / "out"), seeds=[0], n=3,
                                    methods=["base", "ZeroUnlearn-GD"], settings=settings, progress=False),
                        model=model, tok=tok)
    base = summary["methods"]["base"]["recovered"]
    edited = summary["methods"]["ZeroUnlearn-GD"]["recovered"]
    assert base["prompt"]["mean"] == 100.0 and base["ic3"]["mean"] == 100.0 and base["lens:prompt"]["mean"] == 100.0
    assert "chat" in base  # SmolLM2 has a chat template
    assert edited["prompt"]["mean"] == 0.0  # the edit removes the answer from its own prompt
    assert set(edited) == set(base)
    assert (tmp_path / "out" / "audit.png").is_file()
    record = json.loads((tmp_path / "out" / "audit_seed_0.json").read_text())
    for examples in record["plan"]["in_context"]["3"]:
        assert len(examples) == 3
