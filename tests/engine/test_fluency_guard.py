"""The fluency guard: every edit's perplexity cost on a short text, a refused destructive edit, the override."""
from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch

from arch_zoo import FORGET, corpus_perplexity, trained_model
from tiny_models import CORPUS, REPO_ROOT, tiny_hparams_dict, write_corpus
from zerounlearn_editor import ZeroUnlearnGDHyperParams
from zerounlearn_editor.engine.fluency_guard import (
    DEFAULT_MAX_INCREASE,
    GUARD_CHUNKS,
    GUARD_FIRST,
    GUARD_STEP,
    GUARD_WINDOW,
    WARN_INCREASE,
    FluencyError,
    guard_chunks,
    guard_perplexity,
    guard_spans,
    guard_text,
    judge_fluency,
)
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.pipeline import EditReport
from zerounlearn_editor.evaluation.perplexity import leading_token_ids
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model

TEXT = CORPUS[0]
"""One training sentence: the tiny models learn sentences of at most 15 tokens, and text past those positions is
out of their range (the corpus joined into one text has a perplexity in the thousands before any edit)."""
REQUESTS = [{"prompt": p, "subject": s, "ground_truth": a} for p, s, a in FORGET]
ROOT = REPO_ROOT


def _hparams(tmp_path: Path, **changes) -> ZeroUnlearnGDHyperParams:
    config = tiny_hparams_dict(
        tmp_path / "stats",
        write_corpus(tmp_path / "c.jsonl"),
        alg_name="ZeroUnlearn-GD",
        gpt2=True,
        v_lr=0.5,
        v_weight_decay=1e-3,
        clamp_norm_factor=4.0,
        v_num_grad_steps=50,
        target_weight=1e4,
        nullspace_threshold=1e-3,
    )
    config.update(changes)
    return ZeroUnlearnGDHyperParams.from_dict(config)


# a destructive edit: every direction is "null space" (nothing protects general text), no norm penalty, and the
# targets never stop early, with a residual allowed up to 100x the hidden state: the tiny GPT-2's perplexity on its
# own corpus goes up several-fold. (The tiny model's training depends on the torch thread count and the CPU; the
# earlier setting, early stop on and a 20x clamp, measured +1943% with one thread and +5% with two on one machine;
# this one +8700% and +480%.)
DESTRUCTIVE = dict(nullspace_threshold=1e9, norm_weight=1e-6, clamp_norm_factor=100.0, v_early_stop_loss=0.0, v_lr=2.0,
                   v_weight_decay=0.0)


def test_judge():
    ok = judge_fluency(30.0, 39.9, 256, 0.33, "refuse")
    assert ok.passed and ok.increase == pytest.approx(0.33)
    bad = judge_fluency(30.4, 2357.0, 256, DEFAULT_MAX_INCREASE, "refuse")  # issue 28's wrecked Gemma-3
    assert not bad.passed and "30.400 to 2357.000 (+7653.3%)" in bad.message() and "+100%" in bad.message()
    assert not judge_fluency(30.0, math.nan, 256, 1.0, "warn").passed
    assert not judge_fluency(30.0, math.inf, 256, 1.0, "warn").passed
    with pytest.raises(ValueError, match="mode"):
        judge_fluency(1.0, 1.0, 2, 1.0, "ignore")


def test_warning_before_refusal():
    """+5% warns (kept), the refusal stays at the threshold; the report dict says which."""
    assert WARN_INCREASE == pytest.approx(0.05) and WARN_INCREASE < DEFAULT_MAX_INCREASE
    below = judge_fluency(30.0, 31.4, 256, DEFAULT_MAX_INCREASE, "refuse")
    above = judge_fluency(30.0, 33.3, 256, DEFAULT_MAX_INCREASE, "refuse")
    assert below.passed and not below.warned and below.as_dict()["warned"] is False
    assert above.passed and above.warned and above.as_dict()["warned"] is True
    assert "30.000 to 33.300 (+11.0%)" in above.warning() and "above +5%" in above.warning()
    refused = judge_fluency(30.0, 61.0, 256, DEFAULT_MAX_INCREASE, "refuse")
    assert not refused.passed and not refused.warned  # a refusal is not a warning


def test_a_passing_edit_above_the_warning_level_warns(tmp_path, caplog):
    model, tok = trained_model("gpt2")
    hp = _hparams(tmp_path, fluency_max_increase=1e9, **DESTRUCTIVE)  # the destructive edit passes this threshold
    report = EditReport()
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.pipeline"):
        apply_zerounlearn_gd_to_model(model, tok, REQUESTS, hp, progress=False, fluency_text=TEXT, report=report)
    assert report.fluency["passed"] and report.fluency["warned"] and report.fluency["increase"] > WARN_INCREASE
    assert any("a measurable fluency cost" in r.getMessage() for r in caplog.records)


def test_a_destructive_edit_is_refused_and_the_weights_restored(tmp_path):
    model, tok = trained_model("gpt2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hp = _hparams(tmp_path, **DESTRUCTIVE)
    with pytest.raises(
        FluencyError,
        match=r"edit refused and the weights restored: fluency guard: perplexity on \d+ "
        r"tokens of the built-in text went from [\d.]+ to [\d.]+ \(\+\d+\.\d%\)",
    ) as info:
        apply_zerounlearn_gd_to_model(model, tok, REQUESTS, hp, progress=False, fluency_text=TEXT)
    assert info.value.check.increase > DEFAULT_MAX_INCREASE
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())

    # the explicit override keeps it, with a warning, and the figure goes into the report
    report = EditReport()
    apply_zerounlearn_gd_to_model(model, tok, REQUESTS, hp, progress=False, fluency_text=TEXT, fluency_guard="warn",
                                  report=report)
    assert report.fluency["passed"] is False and report.fluency["mode"] == "warn"
    assert report.fluency["increase"] == pytest.approx(info.value.check.increase, rel=1e-4)
    assert corpus_perplexity(model, tok) > 1.5 * corpus_perplexity(trained_model("gpt2")[0], tok)


def test_the_override_warns(tmp_path, caplog):
    model, tok = trained_model("gpt2")
    hp = _hparams(tmp_path, **DESTRUCTIVE)
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.pipeline"):
        apply_zerounlearn_gd_to_model(model, tok, REQUESTS, hp, progress=False, fluency_text=TEXT, fluency_guard="warn")
    assert any("kept because fluency_guard is 'warn'" in r.getMessage() for r in caplog.records)


def test_the_guard_only_reads(tmp_path):
    """An edit that passes is bit-identical with the guard on or off; the report carries the figure."""
    results = []
    for mode in ("refuse", "off"):
        model, tok = trained_model("llama")
        hp = ZeroUnlearnGDHyperParams.from_dict(dict(_hparams(tmp_path).__dict__, **dict(
            rewrite_module_tmp="model.layers.{}.mlp.down_proj", layer_module_tmp="model.layers.{}",
            mlp_module_tmp="model.layers.{}.mlp", ln_f_module="model.norm")))
        report = EditReport()
        apply_zerounlearn_gd_to_model(model, tok, REQUESTS, hp, progress=False, fluency_text=TEXT, fluency_guard=mode,
                                      report=report)
        results.append((model.state_dict(), report))
    (edited, guarded), (plain, off) = results
    assert all(torch.equal(edited[k], plain[k]) for k in edited)
    assert guarded.fluency["passed"] and guarded.fluency["tokens"] > 10 and "fluency" in guarded.timings
    assert abs(guarded.fluency["increase"]) < 0.5 and off.fluency == {}
    assert guarded.fluency["warned"] == (guarded.fluency["increase"] > WARN_INCREASE)


def test_keys_and_defaults(tmp_path):
    hp = ZeroUnlearnHyperParams.from_hparams(ROOT / "hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml")
    assert hp.fluency_max_increase == DEFAULT_MAX_INCREASE
    for value in (0.0, -1.0, float("inf")):
        with pytest.raises(HParamsError, match="'fluency_max_increase' must be (a )?finite"):
            _hparams(tmp_path, fluency_max_increase=value)
    for key in ("fluency_guard", "fluency_tokens"):  # the mode is an argument of the edit, the text length fixed
        with pytest.raises(HParamsError, match=key):
            _hparams(tmp_path, **{key: "warn" if key == "fluency_guard" else 256})
    model, tok = trained_model("gpt2")
    with pytest.raises(ValueError, match="fluency_guard must be one of"):
        apply_zerounlearn_gd_to_model(model, tok, REQUESTS, _hparams(tmp_path), progress=False, fluency_guard="maybe")


def test_null_threshold_turns_the_guard_off(tmp_path):
    """``fluency_max_increase: null`` = no guard: the destructive edit runs and nothing is measured."""
    model, tok = trained_model("gpt2")
    hp = _hparams(tmp_path, fluency_max_increase=None, **DESTRUCTIVE)
    report = EditReport()
    apply_zerounlearn_gd_to_model(model, tok, REQUESTS, hp, progress=False, fluency_text=TEXT, report=report)
    assert report.fluency == {} and "fluency" not in report.timings
    assert corpus_perplexity(model, tok) > 1.5 * corpus_perplexity(trained_model("gpt2")[0], tok)


def test_guard_passages_lie_after_the_bench_perplexity_tokens():
    """Eight passages (128 tokens in the package, 256 here) every 1250 tokens from token 5000 (the bench's perplexity
    scores the first 5000); a text too short for that spreads its passages evenly; one window or less is read whole."""
    assert (GUARD_CHUNKS, GUARD_WINDOW, GUARD_FIRST, GUARD_STEP) == (8, 128, 5000, 1250)
    assert guard_spans(20000, 256) == [(5000 + 1250 * k, 5256 + 1250 * k) for k in range(8)]
    end = 5000 + 7 * 1250 + 256
    assert guard_spans(end, 256)[0] == (5000, 5256)
    short = guard_spans(end - 1, 256)
    assert short[0] == (0, 256) and short[-1] == (end - 1 - 256, end - 1) and len(short) == 8
    assert all(b - a == 256 for a, b in short) and all(a2 > a1 for (a1, _), (a2, _) in zip(short, short[1:]))
    assert guard_spans(1000, 256) == [(0, 256), (372, 628), (744, 1000)]
    assert guard_spans(300, 256) == [(0, 256)] and guard_spans(200, 256) == [(0, 200)]
    with pytest.raises(ValueError, match="at least two tokens"):
        guard_spans(1, 256)


def test_guard_perplexity_is_the_mean_nll_over_every_passage():
    """exp of the mean NLL over the scored tokens of all passages, each scored in a window of its own."""
    model, tok = trained_model("llama")
    chunks = [tok(CORPUS[0])["input_ids"], tok(CORPUS[3])["input_ids"][:5]]
    total, count = 0.0, 0
    with torch.no_grad():
        for chunk in chunks:
            ids = torch.tensor([chunk])
            logits = model(input_ids=ids).logits[0, :-1].float()
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            count += len(chunk) - 1
    assert guard_perplexity(model, tok, chunks) == pytest.approx(math.exp(total / count), rel=1e-5)
    one = guard_perplexity(model, tok, chunks[:1])
    assert one != pytest.approx(guard_perplexity(model, tok, chunks), rel=1e-3)  # the second passage counts


def test_an_edit_guards_on_the_passages_not_the_texts_start(tmp_path, monkeypatch):
    """Without ``fluency_text`` the edit reads the built-in text's passages from token 5000, in windows no longer
    than the model's positions, each opened by the BOS the tokenizer puts before a text; the report counts their
    tokens."""
    import zerounlearn_editor.engine.pipeline as pipeline

    seen = []

    def reading(model, tok, chunks):
        seen.append([list(c) for c in chunks])
        return 10.0

    monkeypatch.setattr(pipeline, "guard_perplexity", reading)
    model, tok = trained_model("gpt2")
    window = min(GUARD_WINDOW, model.config.n_positions)
    report = EditReport()
    apply_zerounlearn_gd_to_model(model, tok, REQUESTS, _hparams(tmp_path), progress=False, report=report)
    ids = leading_token_ids(tok, guard_text(), GUARD_FIRST + 7 * GUARD_STEP + window)
    assert ids[0] == tok.bos_token_id  # the tiny tokenizer puts BOS first, as Gemma's and Llama-3's do
    starts = [5000 + 1250 * k for k in range(8)]
    expected = [[tok.bos_token_id] + ids[s + 1:s + window] for s in starts]  # each passage a document of its own
    assert seen == [expected, expected] and guard_chunks(tok, guard_text(), window) == expected
    assert report.fluency["tokens"] == 8 * window


def test_a_guard_text_given_as_a_file_is_read(tmp_path):
    """``fluency_text`` may name a UTF-8 file, as the perplexity functions accept: its content is read, not the path."""
    _, tok = trained_model("gpt2")
    text = " ".join(CORPUS)
    path = tmp_path / "guard.txt"
    path.write_text(text, encoding="utf-8")
    assert guard_chunks(tok, str(path), 32) == guard_chunks(tok, text, 32) != guard_chunks(tok, "guard.txt text", 32)


def test_passages_keep_a_tokenizer_without_bos_as_it_is():
    """A tokenizer that puts no BOS before a text (SmolLM2's) gets the passages' tokens unchanged."""
    _, tok = trained_model("gpt2")

    class NoBos:
        bos_token_id = None

        def __call__(self, text, **kwargs):
            out = tok(text, **kwargs)
            return {"input_ids": out["input_ids"][1:]}

    text = guard_text()
    ids = leading_token_ids(NoBos(), text, GUARD_FIRST + 7 * GUARD_STEP + 32)
    assert guard_chunks(NoBos(), text, 32) == [ids[s:s + 32] for s in range(5000, 15000, 1250)]
