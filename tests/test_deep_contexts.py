"""Deep-forgetting lever ``experimental: forget_contexts``: schema, request expansion, plumbing.

Each forgotten fact is also edited in other contexts (in-context demonstrations, a question, the chat
template) as separate requests: separate key columns of ``K_f`` and separate target states.
"""
from __future__ import annotations

import pytest
import torch

from tiny_models import forget_requests, tiny_gd_target_hparams, tiny_llama, tiny_tokenizer
from zerounlearn_editor.deep_contexts import DEMONSTRATIONS, ExperimentalSettings, expand_requests
from zerounlearn_editor.facts import CAPITALS_TO_FORGET, fact_requests
from zerounlearn_editor.hparams import HParamsError
from zerounlearn_editor.pipeline import run_layerwise_edit, target_settings
from zerounlearn_editor.requests import normalize_requests

CHAT = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"


class _ChatTok:
    chat_template = CHAT

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + "<|im_start|>assistant\n"


@pytest.mark.parametrize("bad, word", [
    ({"forget_context": ["question"]}, "unknown key"),
    ({"forget_contexts": ["questions"]}, "forget_contexts"),
    ({"forget_contexts": ["chat", "chat"]}, "distinct"),
    ({"forget_contexts": "chat"}, "forget_contexts"),
    ({"in_context_shots": 0}, "in_context_shots"),
    ({"in_context_draws": True}, "in_context_draws"),
    (["question"], "mapping"),
])
def test_experimental_schema_is_strict(tmp_path, bad, word):
    with pytest.raises(HParamsError, match=r"experimental.*" + word):
        tiny_gd_target_hparams(tmp_path, experimental=bad)


def test_paper_settings_leave_requests_and_cache_keys_alone(tmp_path):
    forget = normalize_requests(forget_requests())
    assert expand_requests(forget, ExperimentalSettings.from_mapping({}), _ChatTok()) == forget
    paper = tiny_gd_target_hparams(tmp_path)
    deep = tiny_gd_target_hparams(tmp_path, experimental={"forget_contexts": ["question"]})
    model = tiny_llama(tiny_tokenizer())
    assert "experimental" not in target_settings(model, paper)
    assert target_settings(model, deep)["experimental"]["forget_contexts"] == ("question",)


def test_expansion_keeps_subject_answer_and_index_and_borrows_no_forgotten_fact():
    requests = fact_requests(CAPITALS_TO_FORGET[:4])
    forget = normalize_requests(requests)
    settings = ExperimentalSettings.from_mapping(
        {"forget_contexts": ["in_context", "question", "chat"], "in_context_shots": 3, "in_context_draws": 2})
    out = expand_requests(forget, settings, _ChatTok())
    assert len(out) == 4 * (1 + 2 + 1 + 1)
    assert out[:4] == forget
    forgotten = {w.lower() for r in forget for w in (r.subject, r.answer)}
    for position, request in enumerate(out):
        original = forget[position % 4]
        assert (request.index, request.subject, request.answer, request.target) == (
            original.index, original.subject, original.answer, original.target)
        assert request.prompt.endswith(original.suffix) or request.prompt.endswith("? Answer:")
        assert request.prefix.endswith(original.prefix)  # the key stays at the subject, right before the answer
    in_context = out[4:12]
    for request in in_context:
        lines = request.prompt.split("\n")
        assert len(lines) == 4 and lines[-1] == forget[in_context.index(request) % 4].prompt
        assert not any(w in line.lower() for line in lines[:-1] for w in forgotten)
        assert all(any(line == f"{p} {a}." for p, _, a in DEMONSTRATIONS) for line in lines[:-1])
    assert in_context[0].prefix != in_context[4].prefix  # the second draw borrows other demonstrations
    assert out[12].prompt == "Question: The capital of France is? Answer:"
    assert out[16].prompt.startswith("<|im_start|>user\nFinish this sentence: The capital of France is<|im_end|>")
    assert out[16].prompt.endswith("<|im_start|>assistant\nThe capital of France is")
    assert out[16].prefix.endswith("assistant\nThe capital of ")  # the assistant turn's subject


def test_chat_without_template_is_left_out(caplog):
    forget = normalize_requests(forget_requests())
    out = expand_requests(forget, ExperimentalSettings.from_mapping({"forget_contexts": ["chat", "question"]}), object())
    assert len(out) == 2 * len(forget)
    assert "no chat template" in caplog.text


def test_every_context_is_its_own_key_column_and_target(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_llama(tok)
    hp = tiny_gd_target_hparams(tmp_path, experimental={"forget_contexts": ["question"]})
    seen = []

    def recording_solver(problem):
        seen.append(problem)
        return problem.W.clone()

    before = {k: v.clone() for k, v in model.state_dict().items()}
    run_layerwise_edit(model, tok, forget_requests(), hp, recording_solver, progress=False)
    n = len(forget_requests())
    assert [p.K_f.shape[1] for p in seen] == [2 * n] * len(hp.layers)
    first = seen[0]
    # the question copy reads another key than the bare prompt, and gets its own target residual
    assert not torch.allclose(first.K_f[:, :n], first.K_f[:, n:])
    residual = first.M_n - first.W @ first.K_f
    assert not torch.allclose(residual[:, :n], residual[:, n:])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # identity solver: nothing changed
