"""``fewshot_contexts``: few-shot prefixes of hand-written facts that never name a forgotten fact."""
from __future__ import annotations

import pytest

from tiny_models import REPO_ROOT
from zerounlearn_editor import ZeroUnlearnGDHyperParams
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, OTHER_CAPITALS, UNRELATED_FACTS
from zerounlearn_editor.engine.contexts import fewshot_prefixes
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.requests import normalize_requests

PAPER = REPO_ROOT / "hparams" / "ZeroUnlearn-GD" / "SmolLM2-135M-Instruct.yaml"


def _requests(facts):
    return normalize_requests([{"prompt": p, "subject": s, "ground_truth": a, "target_new": ""} for p, s, a in facts])


def test_prefixes_have_three_facts_and_never_name_a_forgotten_subject_or_answer():
    forget = CAPITALS_TO_FORGET[:5] + [("Hamlet was written by William", "Hamlet", "Shakespeare")]
    prefixes = fewshot_prefixes(_requests(forget), 6)
    assert len(prefixes) == 6 and len(set(prefixes)) == 6
    for prefix in prefixes:
        lines = prefix.splitlines()
        assert len(lines) == 3 and prefix.endswith(".\n")
        for _, subject, answer in forget:
            assert subject.lower() not in prefix.lower() and answer.lower() not in prefix.lower(), (prefix, subject)
    known = {f"{p} {a}." for p, _, a in CAPITALS_TO_FORGET + OTHER_CAPITALS + UNRELATED_FACTS}
    assert all(line in known for prefix in prefixes for line in prefix.splitlines())
    assert fewshot_prefixes(_requests(forget), 0) == []


def test_too_few_facts_left_is_an_error():
    everything = CAPITALS_TO_FORGET + OTHER_CAPITALS + UNRELATED_FACTS
    with pytest.raises(ValueError, match="fewshot_contexts"):
        fewshot_prefixes(_requests(everything[:-2]), 1)


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_bad_value_is_refused(value):
    import yaml

    config = yaml.safe_load(PAPER.read_text())
    config["fewshot_contexts"] = value
    with pytest.raises(HParamsError, match=r"x\.yaml: key 'fewshot_contexts' (must be an integer >= 0|has value)"):
        ZeroUnlearnGDHyperParams.from_dict(config, source="x.yaml")


def test_the_key_under_experimental_names_its_new_place():
    """``fewshot_contexts`` graduated to a top-level key: a file that sets it under ``experimental:`` fails naming
    the file, the old place and the new key; the same value at the top level loads."""
    import yaml

    config = yaml.safe_load(PAPER.read_text())
    config["experimental"] = {"fewshot_contexts": 4}
    with pytest.raises(HParamsError, match=r"x\.yaml: 'experimental\.fewshot_contexts' graduated to the top-level "
                                           r"key 'fewshot_contexts' .*move it out of experimental:, same value"):
        ZeroUnlearnGDHyperParams.from_dict(config, source="x.yaml")
    del config["experimental"]
    assert ZeroUnlearnGDHyperParams.from_dict(dict(config, fewshot_contexts=4), source="x.yaml").fewshot_contexts == 4
    assert ZeroUnlearnGDHyperParams.from_dict(config, source="x.yaml").fewshot_contexts == 0  # the paper's


def test_the_edit_reads_keys_and_targets_in_the_fewshot_contexts_too(tmp_path):
    """With ``fewshot_contexts`` the targets (and their cache key) change; without it they are the paper's."""
    import torch

    from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
    from zerounlearn_editor.engine.pipeline import neutral_targets, target_settings

    tok = tiny_tokenizer()
    model = sharp_tiny_llama(tok)
    paper = tiny_gd_target_hparams(tmp_path)
    fewshot = tiny_gd_target_hparams(tmp_path, fewshot_contexts=2)
    assert "fewshot_contexts" not in target_settings(model, paper)
    assert target_settings(model, fewshot)["fewshot_contexts"] == 2
    z_paper = neutral_targets(model, tok, forget_requests(), paper).z
    z_again = neutral_targets(model, tok, forget_requests(), paper).z
    z_fewshot = neutral_targets(model, tok, forget_requests(), fewshot).z
    assert torch.equal(z_paper, z_again) and not torch.allclose(z_paper, z_fewshot)


def test_a_fact_whose_text_names_a_forgotten_answer_is_not_used():
    """A request answered "Leonardo" / "William" excludes the Mona Lisa / Hamlet facts (their prompts name it)."""
    forget = [("The painter of the Last Supper was", "Last Supper", "Leonardo"),
              ("The playwright of Macbeth was", "Macbeth", "William")]
    prefixes = "".join(fewshot_prefixes(_requests(forget), 30)).lower()
    assert "leonardo" not in prefixes and "william" not in prefixes
    assert "mona lisa" not in prefixes and "hamlet" not in prefixes
