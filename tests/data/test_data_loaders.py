"""Dataset loaders on the real shared files, plus format errors on tiny malformed files."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Dict, List

import pytest

from zerounlearn_editor.data import (
    DATASETS,
    DataFormatError,
    Probe,
    UnlearnCase,
    cloze_to_prompt,
    default_data_dir,
    detect_format,
    load_cases,
    sample_cases,
)
from zerounlearn_editor.support.resources import DATA_DIR_ENV

DATA_DIR = default_data_dir()
EXPECTED_COUNTS = {
    "counterfact": 1129,
    "counterfact-easyedit": 1919,
    "zsre": 1037,
    "zsre-knowedit": 1301,
    "mquake": 612,  # distinct single hops of the 429 chains
    "rwku": 200,  # targets
}

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"shared data not found at {DATA_DIR}")


def _request(prompt: str, subject: str, truth: str) -> Dict[str, str]:
    return {"prompt": prompt, "subject": subject, "ground_truth": truth, "target_new": ""}


def _raw(name: str) -> List[dict]:
    return json.loads((DATA_DIR / DATASETS[name].default_path).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def all_cases() -> Dict[str, List[UnlearnCase]]:
    return {name: load_cases(name) for name in EXPECTED_COUNTS}


# --------------------------------------------------------------------------- counts, invariants


@pytest.mark.parametrize("name", list(EXPECTED_COUNTS))
def test_counts(all_cases, name):
    assert len(all_cases[name]) == EXPECTED_COUNTS[name]


@pytest.mark.parametrize("name", list(EXPECTED_COUNTS))
def test_requests_and_probes_are_well_formed(all_cases, name):
    cases = all_cases[name]
    assert len({c.case_id for c in cases}) == len(cases)
    for case in cases:
        request = case.request
        assert set(request) == {"prompt", "subject", "ground_truth", "target_new"}
        assert request["subject"] and request["subject"] in request["prompt"]
        assert request["target_new"] == ""
        assert request["ground_truth"]
        assert case.source == name
        assert case.forget and case.neighbour
        for probe in case.forget + case.paraphrase + case.neighbour:
            assert isinstance(probe, Probe)
            assert probe.prompt and probe.prompt == probe.prompt.strip()
            assert probe.answer and probe.answer == probe.answer.strip()  # no leading space


# --------------------------------------------------------------------------- field mapping


def test_counterfact_rome_first_record(all_cases):
    raw = _raw("counterfact")[0]
    case = all_cases["counterfact"][0]
    rewrite = raw["requested_rewrite"]
    truth = rewrite["target_true"]["str"]
    prompt = rewrite["prompt"].format(rewrite["subject"])
    assert case.case_id == str(raw["case_id"])
    assert case.request == _request(prompt, rewrite["subject"], truth)
    assert case.forget == [Probe(prompt, truth)]
    assert case.paraphrase == [Probe(p, truth) for p in raw["paraphrase_prompts"]]
    assert case.neighbour == [Probe(p, truth) for p in raw["neighborhood_prompts"]]
    assert (case.request["prompt"], truth) == ("Laurent Cars was employed in", "Paris")


def test_counterfact_easyedit_first_record(all_cases):
    raw = _raw("counterfact-easyedit")[0]
    case = all_cases["counterfact-easyedit"][0]
    assert case.case_id == str(raw["case_id"])
    assert case.request == _request(raw["prompt"], raw["subject"], raw["ground_truth"])
    assert case.forget == [Probe(raw["prompt"], raw["ground_truth"])]
    assert case.paraphrase == [Probe(raw["rephrase_prompt"], raw["ground_truth"])]
    assert case.neighbour == [Probe(raw["locality_prompt"], raw["locality_ground_truth"])]


def test_zsre_mend_first_record(all_cases):
    raw = _raw("zsre")[0]
    case = all_cases["zsre"][0]
    answer = raw["answers"][0]
    assert case.request == _request(raw["src"], raw["subject"], answer)
    assert case.forget == [Probe(raw["src"], answer)]
    assert case.paraphrase == [Probe(raw["rephrase"], answer)]
    assert case.neighbour == [Probe(raw["loc"], raw["loc_ans"])]
    assert case.neighbour[0].prompt.startswith("nq question: ")


def test_surrounding_spaces_are_stripped(tmp_path, all_cases):
    record = {**_raw("zsre")[0], "answers": [" 1998 "], "src": _raw("zsre")[0]["src"] + " "}
    case = load_cases(_write(tmp_path, [record]), format="zsre")[0]
    assert case.forget == [Probe(record["src"].strip(), "1998")]
    assert case.request["ground_truth"] == "1998"
    # a real record with a trailing space in its subject ("Angora goat ")
    raw = _raw("zsre-knowedit")
    index = next(i for i, r in enumerate(raw) if r["subject"] != r["subject"].strip())
    assert all_cases["zsre-knowedit"][index].request["subject"] == raw[index]["subject"].strip()


def test_zsre_knowedit_first_record(all_cases):
    raw = _raw("zsre-knowedit")[0]
    case = all_cases["zsre-knowedit"][0]
    answer = raw["ground_truth"][0]
    assert case.request == _request(raw["prompt"], raw["subject"], answer)
    assert case.forget == [Probe(raw["prompt"], answer)]
    assert case.paraphrase == [Probe(raw["rephrase_prompt"], answer)]
    assert case.neighbour == [
        Probe(item["prompt"], item["ground_truth"][0]) for item in raw["locality"]["Relation_Specificity"]
    ]


def test_mquake_first_case_hops(all_cases):
    raw = _raw("mquake")[0]
    cases = {c.case_id: c for c in all_cases["mquake"]}
    hops = raw["single_hops"]
    for position, hop in enumerate(hops):
        case = cases[f"{raw['case_id']}:hop{position}"]
        subject = raw["orig"]["triples_labeled"][position][0]
        assert case.request == _request(hop["cloze"], subject, hop["answer"])
        assert case.forget == [Probe(hop["cloze"], hop["answer"])]
        assert case.paraphrase == [Probe(hop["question"], hop["answer"])]
        others = [Probe(h["cloze"], h["answer"]) for i, h in enumerate(hops) if i != position]
        assert case.neighbour[: len(others)] == others
        assert case.forget[0] not in case.neighbour
    assert cases[f"{raw['case_id']}:hop0"].request["subject"] == "Hey Jude"


def test_mquake_subject_in_question_and_duplicates_merged(all_cases):
    cases = all_cases["mquake"]
    for case in cases:
        assert case.request["subject"] in case.paraphrase[0].prompt
    facts = [(c.forget[0].prompt, c.forget[0].answer) for c in cases]
    assert len(set(facts)) == len(facts)
    raw_facts = {(h["cloze"].strip(), h["answer"].strip()) for r in _raw("mquake") for h in r["single_hops"]}
    assert set(facts) == raw_facts


def test_rwku_first_target(all_cases):
    rwku = DATA_DIR / "rwku"
    case = all_cases["rwku"][0]
    subject = "Stephen King"
    assert case.case_id == subject and case.request["subject"] == subject

    def raw_probes(name: str) -> List[dict]:
        records = json.loads((rwku / f"{name}.json").read_text(encoding="utf-8"))
        return [r for r in records if r["subject"] == subject]

    level1 = [Probe(cloze_to_prompt(r["query"]), r["answer"]) for r in raw_probes("forget_level1")
              if cloze_to_prompt(r["query"]) is not None]
    level2 = [Probe(r["query"], r["answer"]) for r in raw_probes("forget_level2")]
    level3 = [Probe(r["query"].strip(), r["answer"]) for r in raw_probes("forget_level3")]
    assert case.probe_groups["forget_level1"] == level1
    assert case.probe_groups["forget_level2"] == level2
    assert case.forget == level1 + level2
    assert case.paraphrase == level3
    neighbour_level2 = [Probe(r["query"], r["answer"]) for r in raw_probes("neighbor_level2")]
    assert case.neighbour == case.probe_groups["neighbor_level1"] + neighbour_level2
    first_with_subject = next(p for p in level1 + level2 if subject in p.prompt)
    assert case.request["prompt"] == first_with_subject.prompt
    assert case.request["ground_truth"] == first_with_subject.answer
    assert level1[0] == Probe("Stephen Edwin King (born September 21, 1947) is an American", "author")


def test_rwku_level_totals(all_cases):
    totals: Dict[str, int] = {}
    for case in all_cases["rwku"]:
        for group, probes in case.probe_groups.items():
            totals[group] = totals.get(group, 0) + len(probes)
    # level 2/3 and neighbour level 2 are kept whole; level-1 clozes lose only unusable blanks
    assert totals["forget_level2"] == 2879 and totals["forget_level3"] == 6984
    assert totals["neighbor_level2"] == 5533
    assert 3268 - 50 < totals["forget_level1"] < 3268
    assert 5846 - 150 < totals["neighbor_level1"] < 5846


@pytest.mark.parametrize(
    "query, expected",
    [
        ("Stephen King (born 1947) is an American ___", "Stephen King (born 1947) is an American"),
        ("Stephen King's debut novel, titled ___, established him.", "Stephen King's debut novel, titled"),
        ("Warren Buffett is known as the '___' of Omaha.", "Warren Buffett is known as the"),
        ("born on February __, 1988", "born on February"),
        ("Which team did he own?", "Which team did he own?"),
        ("___ is the father of Emilio Estevez.", None),
        ("from ___ to ___.", None),
        ("over US$___ billion", None),
        ("part-___ descent", None),
    ],
)
def test_cloze_to_prompt(query, expected):
    assert cloze_to_prompt(query) == expected


# --------------------------------------------------------------------------- sampling, paths


def test_sampling_is_deterministic(all_cases):
    cases = all_cases["counterfact"]
    first = load_cases("counterfact", n=10, seed=3)
    expected = random.Random(3).sample(cases, 10)
    assert [c.case_id for c in first] == [c.case_id for c in expected]
    assert [c.case_id for c in sample_cases(cases, 10, seed=3)] == [c.case_id for c in first]
    assert [c.case_id for c in sample_cases(cases, 10, seed=4)] != [c.case_id for c in first]
    assert sample_cases(cases, None) == cases
    assert len(sample_cases(cases, 5000)) == 1129
    with pytest.raises(ValueError):
        sample_cases(cases, -1)


@pytest.mark.parametrize("name", list(EXPECTED_COUNTS))
def test_detect_format(name):
    assert detect_format(DATA_DIR / DATASETS[name].default_path) == name


@pytest.mark.parametrize("name", ["counterfact-easyedit", "rwku"])
def test_load_by_path(all_cases, name):
    path = DATA_DIR / DATASETS[name].default_path
    expected = [c.case_id for c in sample_cases(all_cases[name], 3, seed=1)]
    assert [c.case_id for c in load_cases(str(path), format=name, n=3, seed=1)] == expected
    assert [c.case_id for c in load_cases(path, n=3, seed=1)] == expected  # format detected


def test_data_dir_env_and_argument(tmp_path, monkeypatch):
    target = tmp_path / "counterfact"
    target.mkdir()
    record = _raw("counterfact")[0]
    (target / "counterfact_rome_1129.json").write_text(json.dumps([record]), encoding="utf-8")
    assert len(load_cases("counterfact", data_dir=tmp_path)) == 1
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert default_data_dir() == tmp_path
    assert len(load_cases("counterfact")) == 1


def test_unknown_name_or_format(tmp_path):
    with pytest.raises(ValueError, match="neither a dataset name"):
        load_cases("no-such-dataset")
    path = tmp_path / "odd.json"
    path.write_text(json.dumps([{"foo": 1}]), encoding="utf-8")
    with pytest.raises(ValueError, match="cannot recognise"):
        load_cases(path)
    with pytest.raises(ValueError, match="unknown format"):
        load_cases(path, format="bogus")


# --------------------------------------------------------------------------- malformed records


def _write(tmp_path: Path, records, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def _break(record: dict, dotted: str, value=None, delete: bool = False) -> dict:
    record = json.loads(json.dumps(record))
    *parents, last = dotted.split(".")
    node = record
    for part in parents:
        node = node[part]
    if delete:
        del node[last]
    else:
        node[last] = value
    return record


@pytest.mark.parametrize(
    "name, field, value, delete",
    [
        ("counterfact", "requested_rewrite.target_true", None, True),
        ("counterfact", "paraphrase_prompts", "not a list", False),
        ("counterfact", "requested_rewrite.prompt", "no placeholder", False),
        ("counterfact-easyedit", "locality_ground_truth", None, True),
        ("counterfact-easyedit", "prompt", 3, False),
        ("zsre", "answers", [], False),
        ("zsre", "loc_ans", None, True),
        ("zsre-knowedit", "locality", {"Relation_Specificity": [{"prompt": "x"}]}, False),
        ("mquake", "single_hops", [{"question": "q", "cloze": "c"}], False),
    ],
)
def test_malformed_record_names_file_index_field(tmp_path, name, field, value, delete):
    good = _raw(name)[:3]
    records = [good[0], _break(good[1], field, value, delete), good[2]]
    path = _write(tmp_path, records)
    with pytest.raises(DataFormatError) as info:
        load_cases(path, format=name)
    message = str(info.value)
    assert str(path) in message
    assert "record 1" in message
    assert info.value.index == 1
    top = field.split(".")[0]
    assert info.value.field_name is not None and info.value.field_name.startswith(top)
    assert f"field '{info.value.field_name}'" in message


def test_malformed_rwku_record(tmp_path):
    directory = tmp_path / "rwku"
    directory.mkdir()
    good = {"subject": "Ada", "level": "1", "query": "Ada was born in ___", "type": "cloze", "answer": "X"}
    records = [good, {**good, "answer": ""}]
    (directory / "forget_level1.json").write_text(json.dumps(records), encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        load_cases(directory, format="rwku")
    assert "forget_level1.json" in str(info.value) and "record 1" in str(info.value)
    assert info.value.field_name == "answer"


def test_not_a_list_and_bad_json(tmp_path):
    path = _write(tmp_path, {"prompt": "x"})
    with pytest.raises(DataFormatError, match="expected a JSON list"):
        load_cases(path, format="counterfact")
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    with pytest.raises(DataFormatError, match="broken.json: cannot parse JSON records: Expecting"):
        load_cases(broken, format="counterfact")


def test_records_without_subject_in_prompt_are_skipped(tmp_path, caplog):
    good = _raw("counterfact-easyedit")[:2]
    odd = {**good[1], "subject": "Nobody Here"}
    path = _write(tmp_path, [good[0], odd])
    with caplog.at_level("INFO"):
        cases = load_cases(path, format="counterfact-easyedit")
    assert len(cases) == 1
    assert "skipped 1 of 2" in caplog.text
