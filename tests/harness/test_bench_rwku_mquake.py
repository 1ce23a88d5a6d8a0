"""RWKU probe-group columns, known-target selection and MQuAKE single hops in the bench.

A constant "model" that always predicts the word ``paris`` makes every teacher-forced token
accuracy known in advance: a probe scores the fraction of its answer words equal to ``paris``.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest
import torch
import yaml
from torch import nn

from tiny_models import REPO_ROOT, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus
from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.data.types import Probe, UnlearnCase
from zerounlearn_editor.harness import BenchConfig, run_bench
from zerounlearn_editor.harness.case_scoring import probe_metrics, score_cases
from zerounlearn_editor.harness.neighbours import drop_batch_forget_neighbours
from zerounlearn_editor.harness.report import group_header


class ConstantLM(nn.Module):
    """Logits ``[batch, seq, vocab]`` with the maximum always at ``token_id``."""

    def __init__(self, vocab_size: int, token_id: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        with torch.no_grad():
            self.bias[token_id] = 5.0
        self.config = SimpleNamespace(_name_or_path="constant-lm")

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.bias.expand(*input_ids.shape, -1)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def constant(tok) -> ConstantLM:
    return ConstantLM(len(tok.get_vocab()), tok.convert_tokens_to_ids("paris"))


def _records(subject: str, rows: List[tuple], level: int, neighbour: bool = False) -> List[Dict[str, Any]]:
    out = []
    for query, answer in rows:
        record = {"subject": subject, "level": level, "query": query, "type": "x", "answer": answer}
        if neighbour:
            record["neighbor"] = "other"
        out.append(record)
    return out


def write_tiny_rwku(directory: Path) -> Path:
    """Three targets; with the constant model their per-level accuracies are (x100):

    ======== ==== ==== ==== ==== ====
    target   FL1  FL2  FL3  NL1  NL2
    ======== ==== ==== ==== ==== ====
    france   100  100  50   0    100
    germany  50   50   0    100  50
    italy    0    0    0    0    -
    ======== ==== ==== ==== ==== ====

    forget accuracy (FL1 + FL2 probes pooled): france 1.0, germany 0.5, italy 0.0.
    """
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "forget_level1": _records("france", [("the capital of france is ___ .", "paris")], 1)
        + _records("germany", [("the capital of germany is ___ .", "paris berlin")], 1)
        + _records("italy", [("the capital of italy is ___ .", "rome")], 1),
        "forget_level2": _records("france", [("what is the capital of france", "paris paris")], 2)
        + _records("germany", [("the old city in germany is", "berlin paris")], 2)
        + _records("italy", [("the city in italy is", "rome")], 2),
        "forget_level3": _records("france", [("you live in france and the city is", "paris london")], 3)
        + _records("germany", [("i live in germany and the city is", "berlin")], 3)
        + _records("italy", [("i live in italy and the city is", "rome")], 3),
        "neighbor_level1": _records("france", [("the capital of spain is ___ .", "madrid")], 1, True)
        + _records("germany", [("the capital of japan is ___ .", "paris")], 1, True)
        + _records("italy", [("the capital of egypt is ___ .", "cairo")], 1, True),
        "neighbor_level2": _records("france", [("the city in england is", "paris")], 2, True)
        + _records("germany", [("the city in russia is", "moscow"), ("the old city in japan is", "paris")], 2, True),
    }
    for name, records in files.items():
        (directory / f"{name}.json").write_text(json.dumps(records), encoding="utf-8")
    return directory


EXPECTED = {  # target -> group -> accuracy x100 (see write_tiny_rwku)
    "france": {"forget_level1": 100.0, "forget_level2": 100.0, "forget_level3": 50.0, "neighbor_level1": 0.0,
               "neighbor_level2": 100.0},
    "germany": {"forget_level1": 50.0, "forget_level2": 50.0, "forget_level3": 0.0, "neighbor_level1": 100.0,
                "neighbor_level2": 50.0},
    "italy": {"forget_level1": 0.0, "forget_level2": 0.0, "forget_level3": 0.0, "neighbor_level1": 0.0},
}


def _mean_over_targets(targets: List[str], group: str) -> float:
    values = [EXPECTED[t][group] for t in targets if group in EXPECTED[t]]
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("rwku_bench")
    corpus = write_corpus(root / "corpus.jsonl")
    for alg in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        path = root / "hparams" / alg / "tiny.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(tiny_hparams_dict(root / "stats", corpus, alg_name=alg)), encoding="utf-8")
    return {"root": root, "rwku": write_tiny_rwku(root / "rwku"), "mquake": write_tiny_mquake(root / "mquake.json"),
            "main": root / "hparams" / "ZeroUnlearn" / "tiny.yaml"}


def _config(ws: Dict[str, Path], out: Path, data: str, methods: List[str], **changes: Any) -> BenchConfig:
    values = dict(hparams=str(ws["main"]), data=data, data_path=str(ws[data]), seeds=[1], methods=methods,
                  out=str(out), n=3, ppl_tokens=0, progress=False)
    values.update(changes)
    return BenchConfig(**values)


def test_group_headers():
    assert [group_header(n) for n in ("forget_level1", "forget_level3", "neighbor_level2")] == [
        "FL1 ↓",
        "FL3 ↓",
        "NL2 ↑",
    ]
    assert group_header("forget_extra") == "forget_extra ↓" and group_header("kept") == "kept ↑"


def test_group_scores_of_known_probes(tok, constant, workspace):
    cases = load_cases(workspace["rwku"], format="rwku")
    assert [c.case_id for c in cases] == ["france", "germany", "italy"]
    scores = score_cases(constant, tok, cases, batch_size=2)
    for case, score in zip(cases, scores):
        got = {name: 100.0 * sum(s["acc"]) / len(s["acc"]) for name, s in score.groups.items()}
        assert got == pytest.approx(EXPECTED[case.case_id])
    metrics = probe_metrics(scores, scores)
    targets = ["france", "germany", "italy"]
    for group in EXPECTED["france"]:
        assert metrics[f"group_{group}"] == pytest.approx(_mean_over_targets(targets, group))  # italy has no NL2
    # the loader's forget = FL1 + FL2 and paraphrase = FL3: Eff / Gen follow from the same probes
    assert metrics["eff"] == pytest.approx((100.0 + 50.0 + 0.0) / 3)
    assert metrics["gen"] == pytest.approx((50.0 + 0.0 + 0.0) / 3)


def test_rwku_bench_columns_and_known_targets(tok, constant, workspace, tmp_path):
    out = tmp_path / "out"
    config = _config(workspace, out, "rwku", ["base"], n=2, known_only=True, known_min_accuracy=0.5)
    summary = run_bench(config, model=constant, tok=tok)
    assert summary["known_cases"] == {"qualified": 2, "candidates": 3, "min_accuracy": 0.5}  # italy is unknown
    record = json.loads((out / "seed_1.json").read_text())
    assert sorted(record["case_ids"]) == ["france", "germany"]
    metrics = record["methods"]["base"]["metrics"]
    for group in EXPECTED["france"]:
        expected = _mean_over_targets(["france", "germany"], group)
        assert metrics[f"group_{group}"] == pytest.approx(expected)
        assert summary["methods"]["base"]["metrics"][f"group_{group}"]["mean"] == pytest.approx(expected)
    markdown = (out / "summary.md").read_text()
    assert "| Method | Eff ↓ | Gen ↓ | Spe ↑ | FL1 ↓ | FL2 ↓ | FL3 ↓ | NL1 ↑ | NL2 ↑ |" in markdown
    # Spe pools NL1 + NL2 per target: france [0, 1] -> 50, germany [1, 0, 1] -> 66.7
    assert (
        "| base | 75.0 ± 0.0 | 25.0 ± 0.0 | 58.3 ± 0.0 | 75.0 ± 0.0 | 75.0 ± 0.0 | 25.0 ± 0.0 | 50.0 ± 0.0 | 75.0 ± "
        "0.0 |"
        in markdown
    )
    assert "known-only: 2 of 3 cases reach forget-prompt token accuracy >= 0.5" in markdown
    assert "teacher-forced version of RWKU's scoring" in markdown


def test_rwku_edit_rows_carry_group_columns(tok, workspace, tmp_path):
    out = tmp_path / "out"
    summary = run_bench(_config(workspace, out, "rwku", ["base", "ZeroUnlearn"]), model=tiny_llama(tok), tok=tok)
    for name in ("base", "ZeroUnlearn"):
        assert summary["methods"][name]["status"] == "ok"
        assert {f"group_{g}" for g in EXPECTED["france"]} <= set(summary["methods"][name]["metrics"])
    assert "FL3 ↓" in summary["table_markdown"]


def test_tables_without_groups_have_no_group_columns(tok, constant, workspace, tmp_path):
    summary = run_bench(_config(workspace, tmp_path / "out", "mquake", ["base"]), model=constant, tok=tok)
    assert not any(k.startswith("group_") for k in summary["methods"]["base"]["metrics"])
    assert summary["table_markdown"].splitlines()[0].startswith("| Method | Eff ↓ | Gen ↓ |")
    assert (
        "FL1" not in summary["table_markdown"]
        and "Probe-group columns" not in (tmp_path / "out" / "summary.md").read_text()
    )
    assert "known_cases" not in summary


def write_tiny_mquake(path: Path) -> Path:
    """Two chains sharing the hop "the capital of france is -> paris"."""

    def hop(cloze: str, question: str, answer: str) -> Dict[str, str]:
        return {"cloze": cloze, "question": question, "answer": answer, "answer_alias": []}

    france = hop("the capital of france is", "what is the capital of france", "paris")
    records = [
        {"case_id": 1, "single_hops": [france, hop("the river in paris is", "what is the river in paris", "old")],
         "orig": {"triples_labeled": [["france", "capital", "paris"], ["paris", "river", "old"]]}},
        {"case_id": 2, "single_hops": [hop("the city in egypt is", "what is the city in egypt", "paris"), france],
         "orig": {"triples_labeled": [["egypt", "city", "paris"], ["france", "capital", "paris"]]}},
    ]
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_mquake_single_hops_eff_gen_spe(tok, constant, workspace, tmp_path):
    cases = load_cases(workspace["mquake"], format="mquake")
    assert [c.case_id for c in cases] == ["1:hop0", "1:hop1", "2:hop0"]  # the shared hop is merged
    assert cases[0].paraphrase == [Probe("what is the capital of france", "paris")]
    out = tmp_path / "out"
    summary = run_bench(_config(workspace, out, "mquake", ["base"]), model=constant, tok=tok)
    metrics = summary["methods"]["base"]["metrics"]
    # forget / paraphrase answers: paris, old, paris -> 2 of 3 known
    assert metrics["eff"]["mean"] == pytest.approx(200.0 / 3)
    assert metrics["gen"]["mean"] == pytest.approx(200.0 / 3)
    # every neighbour is another hop of the batch, i.e. knowledge the batch forgets: none is scored
    record = json.loads((out / "seed_1.json").read_text())
    assert record["neighbours_dropped"] == 4
    assert "spe" not in metrics
    # the drop is reported with the table, not only in the seed file
    assert summary["neighbours_dropped"] == {"1": 4}
    assert (
        "not scored as neighbours (`bench.neighbours`): 4 over the seeds (seed 1: 4)"
        in (out / "summary.md").read_text()
    )


def test_mquake_bench_with_an_edit(tok, workspace, tmp_path):
    out = tmp_path / "out"
    summary = run_bench(_config(workspace, out, "mquake", ["base", "ZeroUnlearn"], n=2, seeds=[1, 2]),
                        model=tiny_llama(tok), tok=tok)
    for name in ("base", "ZeroUnlearn"):
        assert summary["methods"][name]["status"] == "ok"
        assert {"eff", "gen"} <= set(summary["methods"][name]["metrics"])


def test_batch_neighbours_forgotten_by_another_case_are_dropped():
    def case(cid: str, forget: str, neighbours: List[str], groups: bool = False) -> UnlearnCase:
        probes = [Probe(p, "x") for p in neighbours]
        return UnlearnCase(cid, {"prompt": forget, "subject": forget, "ground_truth": "x", "target_new": ""},
                           forget=[Probe(forget, "x")], paraphrase=[], neighbour=probes, source="t",
                           probe_groups={"neighbor_level1": probes} if groups else {})

    a = case("a", "fa", ["fb", "n1", "fa"], groups=True)  # "fa" is a's own forget probe: kept
    b = case("b", "fb", ["n2"])
    out, dropped = drop_batch_forget_neighbours([a, b])
    assert dropped == 1
    assert [p.prompt for p in out[0].neighbour] == ["n1", "fa"]
    assert [p.prompt for p in out[0].probe_groups["neighbor_level1"]] == ["n1", "fa"]
    assert out[1] is b and [p.prompt for p in a.neighbour] == ["fb", "n1", "fa"]  # inputs untouched
    alone, none = drop_batch_forget_neighbours([a])
    assert none == 0 and alone[0] is a


def test_rwku_mquake_runfile_loads():
    from zerounlearn_editor.harness import load_runfile

    path = REPO_ROOT / "benchmarks" / "rwku_mquake_runs.yaml"
    configs = {c.name: c for c in load_runfile(path)}
    assert {c.data for c in configs.values()} == {"rwku", "mquake"}
    for config in configs.values():
        assert config.seeds == [1, 2, 3, 4, 5] and config.ppl_tokens == 2000
        assert config.methods == ["base", "GA", "NPO", "ZeroUnlearn", "ZeroUnlearn-GD"]
        assert config.hparams == "hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml" and config.known_only


def test_answer_contained():
    from zerounlearn_editor.harness.case_scoring import answer_contained

    assert answer_contained("Carrie", "his debut novel  carrie was")
    assert answer_contained("New  York", "born in new york city")
    assert not answer_contained("paris berlin", "paris .") and not answer_contained("", "anything")


def test_group_generation_columns(tok, constant, workspace, tmp_path, monkeypatch):
    from zerounlearn_editor.harness import case_scoring

    seen: List[str] = []

    def says_paris(model, tok_, prompts, max_new_tokens, batch_size=16):
        seen.extend(prompts)
        assert max_new_tokens == case_scoring.GROUP_GENERATION_TOKENS
        return ["Paris ." for _ in prompts]

    monkeypatch.setattr(case_scoring, "generate_greedy", says_paris)
    out = tmp_path / "out"
    summary = run_bench(_config(workspace, out, "rwku", ["base"], group_generation=True), model=constant, tok=tok)
    metrics = {k: v["mean"] for k, v in summary["methods"]["base"]["metrics"].items()}
    # the answer is contained only when it is exactly "paris" (see write_tiny_rwku)
    assert metrics["contains_forget_level1"] == pytest.approx(100.0 / 3)  # france
    assert metrics["contains_forget_level2"] == pytest.approx(0.0)  # "paris paris", "berlin paris", "rome"
    assert metrics["contains_neighbor_level1"] == pytest.approx(100.0 / 3)  # germany
    assert metrics["contains_neighbor_level2"] == pytest.approx((100.0 + 50.0) / 2)  # italy has none
    assert len(seen) == len(set(seen)) == 15  # every distinct group probe generated once
    assert "FL1 gen ↓" in summary["table_markdown"] and "NL2 gen ↑" in summary["table_markdown"]
    assert json.loads((out / "seed_1.json").read_text())["run"]["group_generation"] is True


def test_group_generation_runs_on_a_real_model(tok, workspace, tmp_path):
    summary = run_bench(_config(workspace, tmp_path / "out", "rwku", ["base"], group_generation=True),
                        model=tiny_llama(tok), tok=tok)
    values = [v["mean"] for k, v in summary["methods"]["base"]["metrics"].items() if k.startswith("contains_")]
    assert len(values) == 5 and all(0.0 <= v <= 100.0 for v in values)


def test_runfile_reads_group_generation(tmp_path):
    from zerounlearn_editor.harness import BenchConfigError, load_runfile

    run = dict(name="r", hparams="h.yaml", data="rwku", n=2, seeds="1", methods="base", out="o", group_generation=True)
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}), encoding="utf-8")
    assert load_runfile(path)[0].group_generation
    path.write_text(yaml.safe_dump({"runs": [dict(run, group_generation="yes")]}), encoding="utf-8")
    with pytest.raises(BenchConfigError, match="group_generation"):
        load_runfile(path)


def test_seed_file_from_before_the_neighbour_filter_fails_clearly(tok, constant, workspace, tmp_path, caplog):
    """An old seed file (all neighbours kept, no ``neighbours_dropped``) must not get results scored
    with the filtered neighbours; re-summarising it alone only warns."""
    from zerounlearn_editor.harness.bench_config import BenchConfigError

    out = tmp_path / "out"
    run_bench(_config(workspace, out, "mquake", ["base"]), model=constant, tok=tok)
    path = out / "seed_1.json"
    record = json.loads(path.read_text())
    assert record.pop("neighbours_dropped") == 4
    path.write_text(json.dumps(record))
    with pytest.raises(BenchConfigError, match="0 neighbour probe.s. dropped, this run drops 4"):
        run_bench(_config(workspace, out, "mquake", ["base", "ZeroUnlearn"]), model=constant, tok=tok)
    run_bench(_config(workspace, out, "mquake", ["base"]), model=constant, tok=tok)
    assert "this run drops 4" in caplog.text
