"""``zerounlearn utility`` on tiny models: prompts, batched choice scoring, methods, JSON and chart."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List

import pytest
import torch
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from tiny_models import CORPUS, WORDS, tiny_gpt2, tiny_hparams_dict, tiny_llama, write_corpus, write_tiny_counterfact
from zerounlearn_editor.data.types import DataFormatError
from zerounlearn_editor.evaluation.utility import (
    TASKS,
    UtilityItem,
    choice_logprobs,
    load_task_items,
    parse_tasks,
    task_scores,
)
from zerounlearn_editor.harness.utility import UtilityConfig, run_utility

SENTENCE_WORDS = "the city of paris is a large city in france many people live in london".split()


def _sentence(i: int) -> str:
    return " ".join(SENTENCE_WORDS[(i + k) % len(SENTENCE_WORDS)] for k in range(4 + i % 3))


def write_utility_dir(root: Path, per_task: int = 12) -> Path:
    """Tiny label-balanced files in the six tasks' schemas, over a small vocabulary."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("sst2", "cola"):
        rows = [{"sentence": _sentence(i), "label": i % 2, "idx": i} for i in range(per_task)]
        (root / f"{name}.json").write_text(json.dumps(rows))
    for name in ("mrpc", "rte"):
        rows = [
            {"sentence1": _sentence(i), "sentence2": _sentence(i + 1), "label": i % 2, "idx": i}
            for i in range(per_task)
        ]
        (root / f"{name}.json").write_text(json.dumps(rows))
    rows = [{"sentence1": _sentence(i), "sentence2": _sentence(i + 2), "label": ["entailment", "not_entailment"][i % 2],
             "index": str(i)} for i in range(per_task)]
    (root / "nli.json").write_text(json.dumps(rows))
    mmlu = [
        {
            "question": _sentence(i),
            "subject": ["geo", "art"][i % 2],
            "choices": [_sentence(i + k) for k in range(4)],
            "answer": i % 4,
        }
        for i in range(per_task)
    ]
    (root / "mmlu.json").write_text(json.dumps(mmlu))
    (root / "mmlu_fewshot_examples.json").write_text(json.dumps(mmlu[:6]))
    return root


def utility_tokenizer(data_dir: Path) -> PreTrainedTokenizerFast:
    """Word-level tokenizer over every word the tiny utility prompts and the tiny CounterFact use."""
    words = set(WORDS) | {w for line in CORPUS for w in line.split()}
    for name in TASKS:
        for item in load_task_items(name, data_dir, 4, 2):
            words |= set(item.prompt.split()) | set(item.choices)
    words |= {"w1", "w2", "german", "spanish", "."}
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]"])}
    for w in sorted(words):
        vocab.setdefault(w, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")
    backend.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]",
                                   unk_token="[UNK]")


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("utility")
    data_dir = write_utility_dir(root / "utility")
    corpus = write_corpus(root / "corpus.jsonl")
    for alg in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        path = root / "hparams" / alg / "tiny.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(tiny_hparams_dict(root / "stats", corpus, alg_name=alg)))
    return {"root": root, "utility": data_dir, "cf": write_tiny_counterfact(root / "cf.json"),
            "main": root / "hparams" / "ZeroUnlearn" / "tiny.yaml"}


@pytest.fixture(scope="module")
def tok(ws):
    return utility_tokenizer(ws["utility"])


def _reference_logprob(model, tok, prompt: str, word: str) -> float:
    """Unbatched: sum of log p(answer token | prefix) over the answer tokens of prompt + ' ' + word."""
    full = tok(prompt + " " + word)["input_ids"]
    start = len(tok(prompt)["input_ids"])
    with torch.no_grad():
        logits = model(torch.tensor([full])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return float(sum(logp[t - 1, full[t]] for t in range(start, len(full))))


def test_parse_tasks_and_prompts(ws):
    assert parse_tasks("all") == list(TASKS)
    assert parse_tasks("sst2, MMLU,sst2") == ["sst2", "mmlu"]
    with pytest.raises(ValueError, match="unknown utility task"):
        parse_tasks("sst2,boolq")
    items = load_task_items("sst2", ws["utility"], n=4, shots=2, seed=1)
    assert len(items) == 4 and all(i.choices == ("negative", "positive") for i in items)
    # shots: one per label, never a scored record, and each prompt ends with the query's cue
    demos = items[0].prompt.split("\n\n")[:-1]
    assert [d.rsplit(" ", 1)[1] for d in demos] == ["negative", "positive"]
    scored = {i.source_index for i in items}
    rows = json.loads((ws["utility"] / "sst2.json").read_text())
    for demo in demos:
        sentence = demo.split("\n")[0].removeprefix("Review: ")
        assert all(rows[j]["sentence"] != sentence for j in scored)
    assert all(i.prompt.endswith("Sentiment:") for i in items)
    assert load_task_items("sst2", ws["utility"], 4, 2, seed=1) == items  # seeded
    assert load_task_items("sst2", ws["utility"], 4, 2, seed=2) != items
    nli = load_task_items("nli", ws["utility"], 6, 0)
    rows = json.loads((ws["utility"] / "nli.json").read_text())
    assert [i.gold for i in nli] == [0 if rows[i.source_index]["label"] == "entailment" else 1 for i in nli]
    mmlu = load_task_items("mmlu", ws["utility"], 3, 2)
    assert all(
        i.choices == ("A", "B", "C", "D") and "\nD. " in i.prompt and i.prompt.startswith("The following") for i in mmlu
    )


def test_bad_file_names_record_and_field(tmp_path):
    (tmp_path / "sst2.json").write_text(json.dumps([{"sentence": "a", "label": 0}, {"sentence": "b", "label": 7}]))
    with pytest.raises(DataFormatError, match=r"record 1: field 'label': value 7, expected one of \[0, 1\]"):
        load_task_items("sst2", tmp_path, 1, 0)
    (tmp_path / "rte.json").write_text(json.dumps([{"sentence1": "a", "label": 0}]))
    with pytest.raises(DataFormatError, match=r"rte.json: record 0: field 'sentence2': missing field"):
        load_task_items("rte", tmp_path, 1, 0)
    with pytest.raises(DataFormatError, match="cola.json: cola data file not found"):
        load_task_items("cola", tmp_path, 1, 0)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_batched_choice_logprobs_equal_unbatched(ws, tok, arch):
    model = (tiny_llama if arch == "llama" else tiny_gpt2)(tok, seed=3)
    items = load_task_items("mrpc", ws["utility"], 5, 1) + load_task_items("mmlu", ws["utility"], 3, 1)
    # a two-token choice forces the per-choice path
    items.append(UtilityItem("the city of", ("paris", "w1 w2"), 1, -1))
    got = choice_logprobs(model, tok, items, batch_size=3)
    assert [len(g) for g in got] == [len(i.choices) for i in items]
    for item, values in zip(items, got):
        expected = [_reference_logprob(model, tok, item.prompt, w) for w in item.choices]
        assert values == pytest.approx(expected, abs=1e-4)
        assert all(math.isfinite(v) and v < 0 for v in values)


def test_task_scores_counts():
    items = [UtilityItem("p", ("No", "Yes"), g, i) for i, g in enumerate([0, 1, 1, 0])]
    out = task_scores(items, [[-1.0, -2.0], [-1.0, -0.5], [-3.0, -3.0], [-0.1, -4.0]])
    # predictions 0, 1, 0 (tie -> first choice), 0
    assert out["correct"] == [1, 1, 0, 1] and out["accuracy"] == 0.75 and out["chance"] == 0.5
    assert out["pred_fraction"] == {"No": 0.75, "Yes": 0.25} and out["gold_fraction"] == {"No": 0.5, "Yes": 0.5}


def test_run_utility_with_an_edit_restores_and_is_deterministic(ws, tok, tmp_path):
    model = tiny_llama(tok, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = UtilityConfig(hparams=str(ws["main"]), tasks=["sst2", "rte", "mmlu"], out=str(tmp_path / "u.json"), n=4,
                           shots=1, seed=0, methods=["base", "ZeroUnlearn"], data=str(ws["cf"]), n_forget=3,
                           data_dir=str(ws["utility"]), plot=str(tmp_path / "u.png"), progress=False)
    payload = run_utility(config, model=model, tok=tok)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    stored = json.loads((tmp_path / "u.json").read_text())
    assert stored["method"] == "ZeroUnlearn" and stored["methods"] == ["base", "ZeroUnlearn"]
    assert set(stored["tasks"]) == {"sst2", "rte", "mmlu"} and stored["tasks"] == stored["results"]["base"]["tasks"]
    for result in stored["results"].values():
        for name, task in result["tasks"].items():
            assert task["n"] == 4 and 0.0 <= task["accuracy"] <= 1.0
            assert task["chance"] == (0.25 if name == "mmlu" else 0.5)
    assert len(stored["results"]["ZeroUnlearn"]["case_ids"]) == 3
    again = run_utility(config, model=model, tok=tok)
    assert again["results"]["base"]["tasks"] == payload["results"]["base"]["tasks"]
    assert again["results"]["ZeroUnlearn"]["tasks"] == payload["results"]["ZeroUnlearn"]["tasks"]
    pytest.importorskip("matplotlib")
    assert (tmp_path / "u.png").read_bytes()[:4] == b"\x89PNG"


def test_edit_method_needs_data(ws, tok, tmp_path):
    config = UtilityConfig(hparams=str(ws["main"]), tasks=["sst2"], out=str(tmp_path / "u.json"), n=2, shots=0,
                           methods=["base", "ZeroUnlearn"], data_dir=str(ws["utility"]), progress=False)
    with pytest.raises(ValueError, match="--data"):
        run_utility(config, model=tiny_llama(tok), tok=tok)


def test_plot_without_matplotlib_is_a_clear_message(monkeypatch, caplog, tmp_path):
    import builtins

    from zerounlearn_editor.harness.utility import plot_utility

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    payload = {"model": "m", "results": {"base": {"tasks": {"sst2": {"accuracy": 0.5, "chance": 0.5}}}}}
    assert plot_utility(payload, str(tmp_path / "x.png")) is None
    assert "matplotlib is not installed" in caplog.text and not (tmp_path / "x.png").exists()


def test_bench_utility_columns_match_the_utility_command(ws, tok, tmp_path, monkeypatch):
    from zerounlearn_editor.harness import BenchConfig, run_bench

    monkeypatch.setenv("ZEROUNLEARN_DATA_DIR", str(ws["root"]))  # holds utility/
    model = tiny_llama(tok, seed=0)
    config = BenchConfig(
        hparams=str(ws["main"]),
        data=str(ws["cf"]),
        seeds=[1],
        methods=["base", "ZeroUnlearn"],
        out=str(tmp_path / "bench"),
        n=3,
        ppl_tokens=0,
        progress=False,
        utility="sst2,rte",
        utility_n=4,
    )
    summary = run_bench(config, model=model, tok=tok)
    assert summary["run"]["utility"] == "sst2,rte"
    for method in ("base", "ZeroUnlearn"):
        assert {"util_sst2", "util_rte"} <= set(summary["methods"][method]["metrics"])
    assert "sst2 ↑" in summary["table_markdown"] and "rte ↑" in summary["table_markdown"]
    direct = run_utility(
        UtilityConfig(
            hparams=str(ws["main"]),
            tasks=["sst2", "rte"],
            out=str(tmp_path / "u.json"),
            n=4,
            shots=3,
            seed=0,
            data_dir=str(ws["utility"]),
            plot=None,
            progress=False,
        ),
        model=model,
        tok=tok,
    )
    for task in ("sst2", "rte"):
        assert summary["methods"]["base"]["metrics"][f"util_{task}"]["mean"] == 100 * direct["tasks"][task]["accuracy"]


def _with_retain_yaml(ws) -> None:
    """``tiny-retain.yaml`` for ZeroUnlearn-GD+R (the paper GD YAML plus a strong retain null-space weight)."""
    gd = ws["root"] / "hparams" / "ZeroUnlearn-GD"
    config = yaml.safe_load((gd / "tiny.yaml").read_text())
    (gd / "tiny-retain.yaml").write_text(yaml.safe_dump(dict(config, retain_nullspace_weight=1e4)))


def test_retain_aware_rows_need_a_retain_draw(ws, tok, tmp_path):
    _with_retain_yaml(ws)
    config = UtilityConfig(hparams=str(ws["main"]), tasks=["sst2"], out=str(tmp_path / "u.json"), n=2, shots=0,
                           methods=["base", "ZeroUnlearn-GD+R"], data=str(ws["cf"]), n_forget=2,
                           data_dir=str(ws["utility"]), progress=False)
    model = tiny_llama(tok, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="--retain"):
        run_utility(config, model=model, tok=tok)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_retain_set_reaches_the_retain_aware_edit(ws, tok, tmp_path, monkeypatch):
    from zerounlearn_editor.harness import method_rows as bench_registry

    _with_retain_yaml(ws)
    seen: List[List[Dict[str, str]]] = []
    real = bench_registry.default_registry

    def spying_registry():
        registry = real()
        original = registry["ZeroUnlearn-GD+R"]

        class Spy:
            def __getattr__(self, name):
                return getattr(original, name)

            def prepare(self, context):
                prepared = original.prepare(context)
                edit = prepared.edit

                def edit_with_spy(model, tok, requests, bank, retain=None):
                    seen.append(list(retain or []))
                    return edit(model, tok, requests, bank, retain=retain)

                prepared.edit = edit_with_spy
                return prepared

        registry["ZeroUnlearn-GD+R"] = Spy()
        return registry

    monkeypatch.setattr(bench_registry, "default_registry", spying_registry)
    config = UtilityConfig(hparams=str(ws["main"]), tasks=["sst2"], out=str(tmp_path / "u.json"), n=2, shots=0,
                           methods=["base", "ZeroUnlearn-GD", "ZeroUnlearn-GD+R"], data=str(ws["cf"]), n_forget=2,
                           retain="siblings:2", data_dir=str(ws["utility"]), progress=False)
    model = tiny_llama(tok, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    payload = run_utility(config, model=model, tok=tok)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    stored = payload["results"]["ZeroUnlearn-GD+R"]
    assert payload["settings"]["retain"] == "siblings:2"
    assert len(seen) == 1 and seen[0] and seen[0] == stored["retain"]
    assert "retain" not in payload["results"]["ZeroUnlearn-GD"]
    from zerounlearn_editor.data.datasets import load_cases, sample_cases
    from zerounlearn_editor.harness.retain_sets import draw_retain, parse_retain_spec

    pool = list(load_cases(str(ws["cf"])))
    cases = sample_cases(pool, 2, 0)
    assert [c.case_id for c in cases] == stored["case_ids"]
    assert seen[0] == draw_retain(parse_retain_spec("siblings:2"), cases, pool, 0)  # the bench's draw
    forgotten = {c.request["subject"] for c in cases}
    assert all(set(r) >= {"prompt", "subject"} and r["subject"] not in forgotten for r in seen[0])


def test_retain_without_a_retain_aware_row_is_refused(ws, tok, tmp_path):
    config = UtilityConfig(hparams=str(ws["main"]), tasks=["sst2"], out=str(tmp_path / "u.json"), n=2, shots=0,
                           methods=["base", "ZeroUnlearn"], data=str(ws["cf"]), n_forget=2, retain="siblings:2",
                           data_dir=str(ws["utility"]), progress=False)
    with pytest.raises(ValueError, match="retain-aware rows"):
        run_utility(config, model=tiny_llama(tok, seed=0), tok=tok)
    assert not (tmp_path / "u.json").exists()
