"""``benchmarks/deep/ppl_split.py`` (the robust edit's perplexity split) and the scaled audit rows of
``benchmarks/known_cases.py``: per-token NLL that sums to the bench's perplexity, the text share, the added-NLL
summary, and an edit scaled to ``W + s (W' - W)``."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import torch

from tiny_models import tiny_llama, tiny_tokenizer
from zerounlearn_editor.evaluation.perplexity import perplexity_of_ids
from zerounlearn_editor.harness.method_specs import EditOutcome, MethodSpec, PreparedMethod

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_token_nll_sums_to_the_bench_perplexity() -> None:
    split = _load("deep_ppl_split", "benchmarks/deep/ppl_split.py")
    tok = tiny_tokenizer()
    model = tiny_llama(tok)
    ids = [int(i) for i in torch.randint(4, len(tok), (45,), generator=torch.Generator().manual_seed(0))]
    nll = split.token_nll(model, tok, ids, window=16, stride=16, batch_size=2)
    assert nll.shape == (45,)
    assert math.isnan(float(nll[0])) and math.isnan(float(nll[16])) and not nll[1:16].isnan().any()
    expected = perplexity_of_ids(model, tok, ids, window=16, stride=16, batch_size=2)
    assert abs(split.ppl_of(nll) - expected) < 1e-6 * expected  # float32 window sums against float64 tokens


def test_text_share_is_the_output_power_on_the_keys() -> None:
    split = _load("deep_ppl_split", "benchmarks/deep/ppl_split.py")
    W = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    dW = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    assert abs(split.text_share(dW, W, torch.eye(2)) - 1.0 / 5.0) < 1e-12
    # keys only along the first input direction: dW writes nothing there
    assert split.text_share(dW, W, torch.diag(torch.tensor([1.0, 0.0]))) == 0.0


def test_delta_summary_finds_the_costly_token() -> None:
    split = _load("deep_ppl_split", "benchmarks/deep/ppl_split.py")
    tok = tiny_tokenizer()
    ids = tok("the president was born in cairo because people there live")["input_ids"]
    base = torch.full((len(ids),), 1.0, dtype=torch.float64)
    base[0] = float("nan")
    edit = base.clone()
    edit[5] += 3.0
    edit[7] -= 1.0
    summary = split.delta_summary(base, edit, ids, tok, {ids[5]}, n_windows=1, top=2)
    assert abs(summary["added_nll"] - 2.0) < 1e-12 and abs(summary["added_nll_positive"] - 3.0) < 1e-12
    assert summary["top_positions"][0]["position"] == 5 and summary["top_positions"][0]["token"] == tok.decode([ids[5]])
    assert abs(summary["added_at_answer_tokens"] - 3.0) < 1e-12 and summary["answer_token_positions"] == 1
    assert summary["scored_tokens"] == len(ids) - 1 and summary["per_window_added"] == [2.0]


def test_scaled_variant_scales_the_change(monkeypatch) -> None:
    known = _load("known_cases_for_scaled", "benchmarks/known_cases.py")
    change = torch.tensor([[2.0, -4.0]])

    def fake_variant(name, path, method=None):
        def edit(model, tok, requests, stats, retain=None):
            before = {"weight": model.weight.detach().clone()}
            with torch.no_grad():
                model.weight.add_(change)
            return EditOutcome(before, {"retain": retain})

        return MethodSpec(name, lambda lookup: {"hparams": path},
                          lambda ctx: PreparedMethod(name, edit, uses_retain=True))

    monkeypatch.setattr(known, "variant_spec", fake_variant)
    spec = known.scaled_variant_spec("s", "robust.yaml", 0.25)
    assert spec.describe(None) == {"hparams": "robust.yaml", "scaled_change": 0.25}
    prepared = spec.prepare(None)
    assert prepared.uses_retain and prepared.name == "s"
    model = torch.nn.Linear(2, 1, bias=False)
    start = model.weight.detach().clone()
    outcome = prepared.edit(model, None, [], {}, retain=["r"])
    assert torch.allclose(model.weight, start + 0.25 * change)
    assert torch.equal(outcome.weights_copy["weight"], start) and outcome.details == {"retain": ["r"]}
