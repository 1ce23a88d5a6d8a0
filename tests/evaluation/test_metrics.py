"""Evaluation metrics on tiny models whose predictions are known or directly computable."""
from __future__ import annotations

import importlib
import math
from typing import List

import pytest
import torch

from tiny_models import REPO_ROOT
from zerounlearn_editor.data import Probe, UnlearnCase
from zerounlearn_editor.evaluation import (
    easyedit_metrics,
    encode_probe,
    evaluate_probes,
    generate_greedy,
    ngram_entropy,
    perplexity,
    text_ngram_entropy,
)
from zerounlearn_editor.evaluation.metrics import answer_argmax_hits, answer_argmax_ids
from zerounlearn_editor.evaluation.perplexity import (
    output_vocab_size,
    perplexity_of_ids,
    plan_windows,
    window_inputs,
    windows_per_pass,
)
from zerounlearn_editor.harness.case_scoring import score_cases

try:  # tests/ on sys.path (pytest's default for a directory without __init__.py)
    import helpers_tiny as tiny
except ImportError:  # tests/ made a package
    from tests import helpers_tiny as tiny

N_WORDS = tiny.N_WORDS
random_causal_lm = tiny.random_causal_lm
successor_llama = tiny.successor_llama
successor_logits = tiny.successor_logits
tiny_tokenizer = tiny.tiny_tokenizer
words = tiny.words

ARCHS = ["llama", "gpt2", "qwen3"]

# Probes of different prompt/answer lengths, so batches need padding.
VARIED_PROBES = [
    Probe(words(1, 2), words(3)),
    Probe(words(5, 9, 11, 13, 17, 19, 23), words(29, 31, 37)),
    Probe(words(4), words(8, 15, 16)),
    Probe(words(42, 7, 7, 7), words(0)),
    Probe(words(10, 20, 30), words(40, 50)),
]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Run single-threaded: these small forwards gain little from threads, and on a busy
    machine OpenMP spin-waiting made them up to ten times slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def successor(tok):
    return successor_llama(tok)


@pytest.fixture(scope="module", params=ARCHS)
def random_lm(request, tok):
    return random_causal_lm(request.param, tok)


def _direct_scores(model, tok, probe: Probe):
    """Reference: one unpadded forward pass for one probe; (acc, mean log p, sum log p, preds)."""
    encoded = encode_probe(tok, probe)
    ids = torch.tensor([encoded.input_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double()
    log_probs = torch.log_softmax(logits, dim=-1)
    positions = range(encoded.answer_start, len(encoded.input_ids))
    lp = torch.stack([log_probs[t - 1, encoded.input_ids[t]] for t in positions])
    preds = [int(logits[t - 1].argmax()) for t in positions]
    acc = sum(p == encoded.input_ids[t] for p, t in zip(preds, positions)) / len(preds)
    return acc, float(lp.mean()), float(lp.sum()), preds


# --------------------------------------------------------------------------- answer tokens


def test_answer_tokens_follow_prompt_tokens(tok):
    encoded = encode_probe(tok, Probe(words(1, 2), words(3, 4)))
    bos = tok.bos_token_id
    assert encoded.input_ids == [bos, 1, 2, 3, 4]
    assert encoded.answer_start == 3 and encoded.answer_ids == [3, 4]
    no_bos = tiny_tokenizer(bos=False)
    assert encode_probe(no_bos, Probe(words(1), words(2))).input_ids == [1, 2]
    with pytest.raises(ValueError, match="no token precedes"):
        encode_probe(no_bos, Probe("", words(2)))


# --------------------------------------------------------------------------- accuracy, hand-checked


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("bos", [True, False])
def test_accuracy_known_values(successor, padding_side, bos):
    tok = tiny_tokenizer(padding_side=padding_side, bos=bos)
    probes = [
        Probe(words(1, 2), words(3)),  # w2 -> w3: correct            -> 1.0
        Probe(words(1, 2), words(5)),  # predicts w3, not w5          -> 0.0
        Probe(words(1), words(2, 9)),  # w1 -> w2 right, w2 -> w3 != w9 -> 0.5
        Probe(words(7, 8), words(9, 10, 11, 12)),  # -> 1.0
        Probe(words(N_WORDS - 1), words(0)),  # wraps around              -> 1.0
        Probe(words(20), words(21, 0, 1, 5)),  # right, wrong, right, wrong -> 0.5
    ]
    assert evaluate_probes(successor, tok, probes)["acc"] == [1.0, 0.0, 0.5, 1.0, 1.0, 0.5]
    scores = evaluate_probes(successor, tok, probes, batch_size=4)
    assert scores["pred_ids"][2] == [2, 3]
    assert scores["n_tokens"] == [1, 1, 2, 4, 1, 4]
    # first answer token only: probe 3 (w1 -> w2 right) and 6 (w20 -> w21 right) count fully
    assert scores["first_acc"] == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_answer_argmax_hits_known_values(successor, padding_side):
    tok = tiny_tokenizer(padding_side=padding_side)
    probes = [
        Probe(words(1, 2), words(3)),  # the successor: greedy gives it
        Probe(words(1, 2), words(5)),  # not the argmax
        Probe(words(1), words(2, 9)),  # first token right, second wrong: not what greedy produces
        Probe(words(7, 8), words(9, 10, 11, 12)),
        Probe(words(N_WORDS - 1), words(0)),
        Probe(words(20), words(21, 0, 1, 5)),
    ]
    assert answer_argmax_hits(successor, tok, probes, batch_size=4) == [True, False, False, True, True, False]


def test_answer_argmax_hits_equal_full_accuracy_and_skip_full_logits(random_lm, tok):
    """acc == 1.0 of evaluate_probes, on probes the random model answers greedily and on others; the output
    head runs only on the rows that predict answer tokens (logits [answer tokens, vocab]), never [batch, len, vocab]."""
    greedy = []
    for probe in VARIED_PROBES:
        preds = _direct_scores(random_lm, tok, Probe(probe.prompt, words(0)))[3]
        greedy.append(Probe(probe.prompt, words(preds[0])))
    probes = VARIED_PROBES + greedy
    seen = []
    head = random_lm.get_output_embeddings()
    handle = head.register_forward_hook(lambda _m, _args, out: seen.append(tuple(out.shape)))  # runs of the head
    try:
        hits = answer_argmax_hits(random_lm, tok, probes, batch_size=3)
    finally:
        handle.remove()
    assert hits == [acc == 1.0 for acc in evaluate_probes(random_lm, tok, probes, batch_size=3)["acc"]]
    assert hits[len(VARIED_PROBES):] == [True] * len(greedy)
    answer_tokens = sorted(len(encode_probe(tok, p).answer_ids) for p in probes)
    assert sorted(shape[0] for shape in seen) == answer_tokens and all(len(shape) == 2 for shape in seen)
    # the argmax ids themselves (completion requests read them): evaluate_probes' pred_ids
    assert answer_argmax_ids(random_lm, tok, probes, batch_size=3) == evaluate_probes(
        random_lm, tok, probes, batch_size=3)["pred_ids"]


def test_evaluate_probes_applies_the_head_only_where_an_answer_token_is_predicted(random_lm, tok):
    """The output head's input holds, per batch, only the positions that predict an answer token (the union over
    the batch's rows), never every position: on Gemma-3 the head over 262k tokens costs more than the decoder."""
    seen = []
    head = random_lm.get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda _m, args: seen.append(tuple(args[0].shape)))
    try:
        evaluate_probes(random_lm, tok, VARIED_PROBES, batch_size=len(VARIED_PROBES), padding_side="right")
    finally:
        handle.remove()
    encoded = [encode_probe(tok, p) for p in VARIED_PROBES]
    predicting = {t - 1 for e in encoded for t in range(e.answer_start, len(e.input_ids))}  # right padding
    assert len(seen) == 1 and seen[0][:2] == (len(VARIED_PROBES), len(predicting))
    assert len(predicting) < max(len(e.input_ids) for e in encoded)


class _NoKeepArgument(torch.nn.Module):
    """A causal LM whose forward takes no ``logits_to_keep``: every position's logits, as older models give."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=use_cache)


class _IntOnlyKeep(torch.nn.Module):
    """A hand-written forward that takes ``logits_to_keep`` as an int only ("keep the last n"), as remote code may."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep: int = 0):
        logits = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=use_cache).logits
        return logits[:, -logits_to_keep:] if logits_to_keep else logits


def test_evaluate_probes_gives_no_position_tensor_to_an_int_only_logits_to_keep(random_lm, tok):
    """A one-token answer after a two-token prompt keeps position 1: an int 1 would have kept the LAST position."""
    probes = VARIED_PROBES + [Probe(words(2), words(3))]
    wrapped = evaluate_probes(_IntOnlyKeep(random_lm), tok, probes, batch_size=2)
    kept = evaluate_probes(random_lm, tok, probes, batch_size=2)
    assert wrapped["pred_ids"] == kept["pred_ids"]
    assert wrapped["seq_prob"] == pytest.approx(kept["seq_prob"], rel=1e-5)


def test_evaluate_probes_slices_the_logits_of_a_forward_without_logits_to_keep(random_lm, tok):
    plain = evaluate_probes(_NoKeepArgument(random_lm), tok, VARIED_PROBES, batch_size=2)
    kept = evaluate_probes(random_lm, tok, VARIED_PROBES, batch_size=2)
    assert plain["acc"] == kept["acc"] and plain["pred_ids"] == kept["pred_ids"]
    assert plain["seq_prob"] == pytest.approx(kept["seq_prob"], rel=1e-5)


def test_answer_argmax_hits_fall_back_when_the_forward_skips_the_head(successor, tok, monkeypatch):
    """A model whose forward makes its logits without calling get_output_embeddings()'s module: the full-logit
    path answers (the same hits), instead of a KeyError."""
    probes = [Probe(words(1, 2), words(3)), Probe(words(1, 2), words(5))]
    monkeypatch.setattr(successor, "unused_head", torch.nn.Linear(4, 4), raising=False)  # a submodule the forward skips
    monkeypatch.setattr(successor, "get_output_embeddings", lambda: successor.unused_head)
    assert answer_argmax_hits(successor, tok, probes) == [True, False]


def test_probabilities_match_hand_computation(successor, tok):
    def p(after: int, target: int) -> float:
        return float(torch.softmax(successor_logits(successor, after), dim=-1)[target])

    probes = [Probe(words(1, 2), words(3)), Probe(words(1, 2), words(5)), Probe(words(1), words(2, 9))]
    expected_tokens = [[p(2, 3)], [p(2, 5)], [p(1, 2), p(2, 9)]]
    result = evaluate_probes(successor, tok, probes)
    for got_geo, got_seq, token_probs in zip(result["prob"], result["seq_prob"], expected_tokens):
        seq = math.prod(token_probs)
        assert got_seq == pytest.approx(seq, rel=1e-4)
        assert got_geo == pytest.approx(seq ** (1 / len(token_probs)), rel=1e-4)
    assert result["prob"][0] > 0.9 and result["prob"][1] < 1e-3


# --------------------------------------------------------------------------- batching invariance


def test_padded_batches_match_unpadded_forward(random_lm, tok):
    scores = evaluate_probes(random_lm, tok, VARIED_PROBES, batch_size=len(VARIED_PROBES))
    for i, probe in enumerate(VARIED_PROBES):
        acc, mean_lp, sum_lp, preds = _direct_scores(random_lm, tok, probe)
        assert scores["acc"][i] == acc
        assert scores["pred_ids"][i] == preds
        assert math.log(scores["prob"][i]) == pytest.approx(mean_lp, abs=1e-4)
        assert math.log(scores["seq_prob"][i]) == pytest.approx(sum_lp, abs=1e-4)


def test_padding_side_invariance(random_lm, tok):
    left = evaluate_probes(random_lm, tok, VARIED_PROBES, padding_side="left")
    right = evaluate_probes(random_lm, tok, VARIED_PROBES, padding_side="right")
    left_tok = evaluate_probes(random_lm, tiny_tokenizer(padding_side="left"), VARIED_PROBES)
    for other in (right, left_tok):
        assert other["acc"] == left["acc"]
        assert other["pred_ids"] == left["pred_ids"]
        assert other["prob"] == pytest.approx(left["prob"], rel=1e-5)
        assert other["seq_prob"] == pytest.approx(left["seq_prob"], rel=1e-5)


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_batch_size_invariance(random_lm, tok, batch_size):
    full = evaluate_probes(random_lm, tok, VARIED_PROBES, batch_size=32)
    small = evaluate_probes(random_lm, tok, VARIED_PROBES, batch_size=batch_size)
    assert small["acc"] == full["acc"]
    assert small["pred_ids"] == full["pred_ids"]
    assert small["prob"] == pytest.approx(full["prob"], rel=1e-5)


def test_state_is_preserved_and_model_left_in_eval(tok):
    model = random_causal_lm("llama", tok)
    model.train()
    left_tok = tiny_tokenizer(padding_side="left")
    evaluate_probes(model, left_tok, VARIED_PROBES, padding_side="right")
    assert left_tok.padding_side == "left"
    assert not model.training
    generate_greedy(model, left_tok, ["w1 w2"], max_new_tokens=2)
    assert left_tok.padding_side == "left"


def test_empty_probe_list(successor, tok):
    empty = evaluate_probes(successor, tok, [])
    assert empty == {"acc": [], "first_acc": [], "prob": [], "seq_prob": [], "pred_ids": [], "n_tokens": []}


# --------------------------------------------------------------------------- perplexity


def _window_nll(model, input_ids: List[int], masked: int):
    """``(summed NLL, tokens scored)`` of one forward pass by the model's loss, its first ``masked`` tokens unscored."""
    inputs = torch.tensor([input_ids])
    labels = inputs.clone()
    labels[0, :masked] = -100
    with torch.no_grad():
        loss = model(input_ids=inputs, labels=labels).loss
    scored = int((labels[:, 1:] != -100).sum())
    return float(loss) * scored, scored


def _hf_recipe_ppl(model, ids: List[int], window: int, stride: int) -> float:
    """The HF documentation's strided perplexity loop, one window at a time, via the model's loss."""
    nll_sum, n_scored, prev_end = 0.0, 0, 0
    for begin in range(0, len(ids), stride):
        end = min(begin + window, len(ids))
        nll, scored = _window_nll(model, ids[begin:end], (end - begin) - (end - prev_end))
        nll_sum, n_scored, prev_end = nll_sum + nll, n_scored + scored, end
        if end == len(ids):
            break
    return math.exp(nll_sum / n_scored)


TEXT = words(*[(7 * i + 3) % N_WORDS for i in range(45)])


def test_perplexity_single_window_equals_model_loss(random_lm, tok):
    ids = tok(TEXT)["input_ids"]
    with torch.no_grad():
        loss = random_lm(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss
    expected = math.exp(float(loss))
    assert perplexity(random_lm, tok, TEXT, window=128, stride=128) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("window, stride", [(8, 8), (10, 4), (16, 5)])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_perplexity_strided_matches_reference(tok, window, stride, batch_size):
    # as tokenized: a tokenizer without BOS, or bos_windows=False, scores the HF recipe's windows
    model = random_causal_lm("llama", tok)
    ids = tok(TEXT)["input_ids"]
    expected = _hf_recipe_ppl(model, ids, window, stride)
    got = perplexity(model, tok, TEXT, window=window, stride=stride, batch_size=batch_size, bos_windows=False)
    assert got == pytest.approx(expected, rel=1e-5)
    left_tok = tiny_tokenizer(padding_side="left")
    left = perplexity(model, left_tok, TEXT, window=window, stride=stride, batch_size=batch_size, bos_windows=False)
    assert left == pytest.approx(expected, rel=1e-5)
    no_bos = tiny_tokenizer(bos=False)
    plain = no_bos(TEXT)["input_ids"]
    assert perplexity(model, no_bos, TEXT, window=window, stride=stride, batch_size=batch_size) == pytest.approx(
        _hf_recipe_ppl(model, plain, window, stride), rel=1e-5)


def _bos_window_ppl(model, ids: List[int], window: int, stride: int) -> float:
    """Reference for a BOS-opened text: the text after the BOS in windows of ``window - 1`` tokens, each run as
    ``[BOS] + window`` with the tokens scored in an earlier window masked out, one forward pass a window."""
    bos, body = ids[0], ids[1:]
    nll_sum, n_scored, prev_end = 0.0, 0, 0
    for begin in range(0, len(body), min(stride, window - 1)):
        end = min(begin + window - 1, len(body))
        nll, scored = _window_nll(model, [bos] + body[begin:end], 1 + max(prev_end, begin) - begin)
        nll_sum, n_scored, prev_end = nll_sum + nll, n_scored + scored, end
        if end == len(body):
            break
    return math.exp(nll_sum / n_scored)


@pytest.mark.parametrize("window, stride", [(8, 8), (10, 4), (16, 5)])
@pytest.mark.parametrize("padding_side, batch_size", [("right", 1), ("right", 3), ("left", 3)])
def test_perplexity_opens_every_window_with_bos_where_the_text_opens_with_it(window, stride, padding_side,
                                                                             batch_size):
    tok = tiny_tokenizer(padding_side=padding_side)
    model = random_causal_lm("llama", tok)
    ids = tok(TEXT)["input_ids"]
    assert ids[0] == tok.bos_token_id
    expected = _bos_window_ppl(model, ids, window, stride)
    assert perplexity(model, tok, TEXT, window=window, stride=stride, batch_size=batch_size) == pytest.approx(
        expected, rel=1e-5)
    assert expected != pytest.approx(_hf_recipe_ppl(model, ids, window, stride), rel=1e-3)  # another layout
    # a stream that does not open with BOS (a slice of the text) is scored as tokenized
    assert perplexity_of_ids(model, tok, ids[1:], window, stride, batch_size) == pytest.approx(
        _hf_recipe_ppl(model, ids[1:], window, stride), rel=1e-5)


def test_window_inputs_with_bos_read_every_token_once_after_a_bos():
    bos, ids = 99, [99] + list(range(1, 21))  # BOS, then tokens 1..20
    disjoint = window_inputs(ids, 8, 8, bos)
    assert [inputs for _, inputs in disjoint] == [[99, 1, 2, 3, 4, 5, 6, 7], [99, 8, 9, 10, 11, 12, 13, 14],
                                                  [99, 15, 16, 17, 18, 19, 20]]
    for window, stride in [(8, 8), (10, 4), (16, 5), (2, 1), (30, 30)]:
        planned = window_inputs(ids, window, stride, bos)
        scored = [t for w, _ in planned for t in range(w.score_from, w.end)]
        assert scored == list(range(1, 21))  # every token after the BOS, once, the first windows' tokens too
        for w, inputs in planned:
            assert inputs == [bos] + ids[w.begin:w.end] and len(inputs) <= window
    assert window_inputs(ids, 8, 8, None) == [(w, ids[w.begin:w.end]) for w in plan_windows(len(ids), 8, 8)]
    with pytest.raises(ValueError, match="window"):
        window_inputs(ids, 1, 1, bos)
    for layout in (bos, None):  # a stride beyond the window is refused in both layouts
        with pytest.raises(ValueError, match="stride must be in"):
            window_inputs(ids, 8, 9, layout)


# the package exports the function perplexity, which hides the module of that name
perplexity_module = importlib.import_module("zerounlearn_editor.evaluation.perplexity")


def test_windows_per_pass_caps_the_logits_of_a_large_vocabulary():
    # SmolLM2 (49,152 tokens): 4 windows of 512 fit in 512 MiB; Gemma-3 (262,144): 537 MB a window, so one
    assert windows_per_pass(4, 512, 49152) == 4
    assert windows_per_pass(4, 512, 262144) == 1
    assert windows_per_pass(4, 512, 262144, budget_bytes=1) == 1  # at least one window is always scored
    assert windows_per_pass(8, 100, 1000, budget_bytes=4 * 100 * 1000 * 3) == 3
    with pytest.raises(ValueError, match="batch_size"):
        windows_per_pass(0, 512, 1000)


def test_perplexity_over_budget_runs_one_window_a_pass_with_the_same_result(tok, monkeypatch):
    model = random_causal_lm("llama", tok)
    ids = tok(TEXT)["input_ids"]
    expected = _hf_recipe_ppl(model, ids, 10, 4)
    rows_per_pass = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_pass.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    assert perplexity(model, tok, TEXT, window=10, stride=4, batch_size=3,
                      bos_windows=False) == pytest.approx(expected, rel=1e-5)
    assert max(rows_per_pass) == 3
    rows_per_pass.clear()
    monkeypatch.setattr(perplexity_module, "LOGITS_BUDGET_BYTES", 4 * 10 * output_vocab_size(model))
    assert perplexity(model, tok, TEXT, window=10, stride=4, batch_size=3,
                      bos_windows=False) == pytest.approx(expected, rel=1e-5)
    assert rows_per_pass and set(rows_per_pass) == {1}
    handle.remove()


def test_perplexity_reads_files_and_truncates(tmp_path, tok):
    model = random_causal_lm("gpt2", tok)
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    direct = perplexity(model, tok, TEXT, window=8, stride=8)
    assert perplexity(model, tok, path, window=8, stride=8) == pytest.approx(direct)
    assert perplexity(model, tok, str(path), window=8, stride=8) == pytest.approx(direct)
    ids = tok(TEXT)["input_ids"][:20]
    assert perplexity(model, tok, TEXT, max_tokens=20, window=8, stride=8) == pytest.approx(
        _bos_window_ppl(model, ids, 8, 8), rel=1e-5
    )
    with pytest.raises(FileNotFoundError):
        perplexity(model, tok, str(tmp_path / "missing.txt"))


def test_successor_model_perplexity_hand_computed(successor, tok):
    ids = tok(words(*range(30)))["input_ids"]  # <bos> w0 .. w29

    def log_p(after: int, target: int) -> float:
        return float(torch.log_softmax(successor_logits(successor, after), dim=-1)[target])

    nll = -sum(log_p(a, b) for a, b in zip(ids[:-1], ids[1:]))
    expected = math.exp(nll / (len(ids) - 1))
    got = perplexity(successor, tok, words(*range(30)), window=8, stride=4, batch_size=2, bos_windows=False)
    assert got == pytest.approx(expected, rel=1e-4)
    # with BOS before every window of 7 words: disjoint windows read w0, w7, w14, w21 and w28 after the BOS, every
    # other word after its predecessor; overlapping ones (stride 4) read only w0 after it
    for stride, after_bos in [(8, {0, 7, 14, 21, 28}), (4, {0})]:
        nll_bos = -sum(log_p(ids[0] if k in after_bos else ids[k], ids[k + 1]) for k in range(30))
        got_bos = perplexity(successor, tok, words(*range(30)), window=8, stride=stride, batch_size=2)
        assert got_bos == pytest.approx(math.exp(nll_bos / 30), rel=1e-4)


def test_window_plan_scores_each_token_at_most_once():
    # overlapping windows score every token but the first, once
    for n, window, stride in [(45, 10, 4), (100, 16, 5), (7, 16, 16)]:
        scored = [t for w in plan_windows(n, window, stride) for t in range(w.score_from, w.end)]
        assert scored == list(range(1, n))
    # disjoint windows (stride == window) leave each window's first token unscored
    scored = [t for w in plan_windows(45, 8, 8) for t in range(w.score_from, w.end)]
    assert scored == [t for t in range(45) if t % 8 != 0]
    with pytest.raises(ValueError):
        plan_windows(10, 4, 5)


# --------------------------------------------------------------------------- fluency, generation


def test_ngram_entropy_hand_computed():
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))  # bigrams (a b) x2, (b a) x1
    h3 = 1.0  # trigrams (a b a), (b a b)
    expected = (2 / 3 * h2 + 4 / 3 * h3) / 2
    assert text_ngram_entropy("a b a b") == pytest.approx(expected)
    assert text_ngram_entropy("x x x x x x") == 0.0
    assert ngram_entropy(["a b a b", "x x x x x x"]) == pytest.approx(expected / 2)
    assert text_ngram_entropy("one, two.") == pytest.approx(
        (2 / 3 * math.log2(3) + 4 / 3 * 1.0) / 2
    )  # tokens: one , two .  -> 3 distinct bigrams, 2 distinct trigrams
    assert math.isnan(ngram_entropy([]))


def test_generate_greedy_batched_left_padding(successor):
    tok = tiny_tokenizer(padding_side="right")
    prompts = [words(1), words(5, 6, 7), words(N_WORDS - 2, 3, 58)]
    out = generate_greedy(successor, tok, prompts, max_new_tokens=3, batch_size=3)
    assert out == [words(2, 3, 4), words(8, 9, 10), words(59, 0, 1)]
    assert generate_greedy(successor, tok, prompts, max_new_tokens=3, batch_size=1) == out
    assert tok.padding_side == "right"


def test_generate_greedy_random_models_match_unbatched(random_lm, tok):
    prompts = [words(1, 2, 3, 4, 5), words(9), words(11, 12)]
    batched = generate_greedy(random_lm, tok, prompts, max_new_tokens=4, batch_size=3)
    single = [generate_greedy(random_lm, tok, [p], max_new_tokens=4)[0] for p in prompts]
    assert batched == single


# --------------------------------------------------------------------------- EasyEdit layout


def _case() -> UnlearnCase:
    return UnlearnCase(
        case_id="c1",
        request={"prompt": words(1, 2), "subject": words(1), "ground_truth": words(3), "target_new": ""},
        forget=[Probe(words(1, 2), words(3))],
        paraphrase=[Probe(words(9, 2), words(3)), Probe(words(1), words(2, 9))],
        neighbour=[Probe(words(4, 5), words(6, 7))],
        source="test",
    )


def test_easyedit_metrics_layout(successor, tok):
    case = _case()
    pre, = score_cases(successor, tok, [case])
    post, = score_cases(random_causal_lm("llama", tok), tok, [case])
    metrics = easyedit_metrics(0, case.request, pre, post, time=1.5)
    assert metrics["case_id"] == 0 and metrics["time"] == 1.5
    assert metrics["requested_rewrite"] == case.request
    assert metrics["pre"]["rewrite_acc"] == [1.0]
    assert metrics["pre"]["rephrase_acc"] == [1.0, 0.5]
    assert metrics["pre"]["locality"]["neighborhood_output"] == [[6, 7]]
    assert metrics["pre"]["locality"]["neighborhood_truth_acc"] == [1.0]
    assert "neighborhood_acc" not in metrics["pre"]["locality"]
    post_out = metrics["post"]["locality"]["neighborhood_output"][0]
    agreement = sum(a == b for a, b in zip([6, 7], post_out)) / 2
    assert metrics["post"]["locality"]["neighborhood_acc"] == [agreement]
    same = easyedit_metrics(1, case.request, pre, pre)
    assert same["post"]["locality"]["neighborhood_acc"] == [1.0]
    assert "post" not in easyedit_metrics(0, case.request, pre)


def test_real_wikitext_file_runs(tok):
    path = REPO_ROOT / ".." / "shared" / "data" / "text" / "wikitext2_raw_test.txt"
    if not path.is_file():
        pytest.skip("shared wikitext file not available")
    model = random_causal_lm("llama", tok)
    value = perplexity(model, tok, path, max_tokens=300, window=64, stride=64, batch_size=4)
    assert math.isfinite(value) and value > 1.0


# --------------------------------------------------------------------------- real model (slow)


@pytest.mark.slow
def test_real_smollm2_probe_metrics(smollm2_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    model = AutoModelForCausalLM.from_pretrained(smollm2_path)
    probes = [
        Probe("The capital of France is", "Paris"),
        Probe("Laurent Cars was employed in", "Paris"),
        Probe("The Eiffel Tower is located in the city of", "Paris"),
        Probe("Victor Hugo was a famous French", "writer and poet"),
    ]
    encoded = encode_probe(tok, probes[0])
    assert tok.convert_ids_to_tokens(encoded.answer_ids) == ["ĠParis"]  # leading-space token
    side = tok.padding_side
    left = evaluate_probes(model, tok, probes, padding_side="left")
    right = evaluate_probes(model, tok, probes, padding_side="right", batch_size=3)
    assert tok.padding_side == side
    assert left["acc"] == right["acc"] and left["pred_ids"] == right["pred_ids"]
    assert left["prob"] == pytest.approx(right["prob"], rel=1e-3)
    assert left["acc"][0] == 1.0 and left["prob"][0] > 0.3
    text = REPO_ROOT / ".." / "shared" / "data" / "text" / "wikitext2_raw_test.txt"
    if text.is_file():
        value = perplexity(model, tok, text, max_tokens=128, window=64, stride=64, batch_size=2)
        assert 2.0 < value < 1000.0, value
