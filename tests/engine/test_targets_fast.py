"""Opt-in cheaper target optimisation (targets_fast): cached prefix keys/values and projected L-BFGS."""
from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
import torch

import arch_zoo
from tiny_models import TINY_BUILDERS, forget_requests, tiny_tokenizer
from zerounlearn_editor.engine.architectures import detect_templates
from zerounlearn_editor.engine.contexts import context_prefixes
from zerounlearn_editor.engine.encoding import target_token_ids
from zerounlearn_editor.engine.hparams import HParamsError
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.engine.targets import TargetConfig, layer_kv, loss_layer_module, optimise_neutral_targets
from zerounlearn_editor.engine.targets.kv_suffix import KVSuffix
from zerounlearn_editor.engine.targets.layer_kv import LayerKV
from zerounlearn_editor.methods.zerounlearn.config import ZeroUnlearnHyperParams
from zerounlearn_editor.support.model_access import StopForward, capture_outputs, get_module, hidden_of

BUILDERS = TINY_BUILDERS


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _names(arch: str):
    if arch == "gpt2":
        return "transformer.h.{}", "transformer.ln_f"
    return "model.layers.{}", "model.norm"


def _config(model, arch: str, loss_layer: int = -1, **changes) -> TargetConfig:
    layer_tmp, ln_f = _names(arch)
    cfg = TargetConfig(
        layer_module=layer_tmp.format(1), ln_f_module=ln_f, lm_head_module="lm_head",
        loss_layer_module=loss_layer_module(model, loss_layer, layer_tmp), fact_token="subject_last",
        steps=12, lr=0.5, weight_decay=1e-3, clamp_norm_factor=4.0, kl_factor=0.1, early_stop_loss=0.05, chunk_size=8,
    )
    return replace(cfg, **changes)


def _model(arch: str, tok):
    model = BUILDERS[arch](tok)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)  # sharp predictions: the targets have something to move
    return model.eval()


def _full_forward(model, arch, ids, mask, lookup, delta, loss_layer: int = -1):
    """Final-norm hidden ``[rows, seq, d]`` of the full model with ``delta`` ``[rows, d]`` added at ``lookup``."""
    layer_tmp, ln_f_name = _names(arch)
    layer = get_module(model, layer_tmp.format(1))
    ln_f = get_module(model, ln_f_name)
    captured = {}

    def add(_m, _a, out):
        h = hidden_of(out)
        extra = torch.zeros_like(h)
        extra[torch.arange(len(ids)), lookup] = delta
        h = h + extra
        return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h

    def grab(_m, _a, out):
        h = hidden_of(out)
        captured["h"] = ln_f(h) if loss_layer >= 0 else h
        raise StopForward

    target = get_module(model, layer_tmp.format(loss_layer)) if loss_layer >= 0 else ln_f
    handles = [layer.register_forward_hook(add), target.register_forward_hook(grab)]
    try:
        with torch.no_grad(), contextlib.suppress(StopForward):
            model(input_ids=ids, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    return captured["h"]


@pytest.mark.parametrize("arch", sorted(BUILDERS))
@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("loss_layer", [-1, 2])
def test_kv_cached_step_equals_the_full_forward(arch, padding, loss_layer, tok):
    """Rows of different lengths (context prefixes, padding): every position from the lookup on matches."""
    model = _model(arch, tok)
    texts = [
        "the capital of france is paris",
        "i plays piano",
        "many people live in london and it was known for its river",
        "tokyo is in asia",
    ]
    lookups_in_text = [3, 1, 5, 0]
    rows = [tok(t)["input_ids"] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    lookup = torch.zeros(len(rows), dtype=torch.long)
    for i, r in enumerate(rows):
        off = width - len(r) if padding == "left" else 0
        ids[i, off : off + len(r)] = torch.tensor(r)
        mask[i, off : off + len(r)] = 1
        lookup[i] = off + 1 + lookups_in_text[i]  # +1: BOS
    end = mask.sum(1) if padding == "right" else torch.full((len(rows),), width)  # one past the last token
    layer_tmp, ln_f_name = _names(arch)
    lm = loss_layer_module(model, loss_layer, layer_tmp)
    assert KVSuffix.supported(model, layer_tmp.format(1), lm, ln_f_name, width)
    with torch.no_grad(), capture_outputs(model, [layer_tmp.format(1)], stop_after=layer_tmp.format(1)) as out, \
            contextlib.suppress(StopForward):
        model(input_ids=ids, attention_mask=mask)
    kv = KVSuffix(model, layer_tmp.format(1), lm, ln_f_name, out[layer_tmp.format(1)], mask, lookup, end)
    torch.manual_seed(0)
    delta = torch.randn(len(rows), model.config.hidden_size) * 3.0
    full = _full_forward(model, arch, ids, mask, lookup, delta, loss_layer)
    for subset in (torch.arange(len(rows)), torch.tensor([2, 0])):  # all rows, and a sub-batch
        with torch.no_grad():
            fast = kv.step(subset, delta[subset])
        for k, r in enumerate(subset.tolist()):
            n_pos = int(end[r] - lookup[r])
            torch.testing.assert_close(fast[k, :n_pos], full[r, lookup[r] : end[r]], rtol=1e-4, atol=1e-5)
        # only some positions (the loss positions): the last layer runs there only, the states are the same
        i = torch.tensor([k for k, r in enumerate(subset.tolist()) for _ in range(2)])
        t = torch.tensor([p for r in subset.tolist() for p in (int(end[r] - lookup[r]) - 1, 0)])
        with torch.no_grad():
            picked = kv.step(subset, delta[subset], select=(i, t))
        assert picked.shape == (len(i), model.config.hidden_size)
        expected = torch.stack([full[int(subset[k]), int(lookup[subset[k]]) + int(p)] for k, p in zip(i, t)])
        torch.testing.assert_close(picked, expected, rtol=1e-4, atol=1e-5)
        none = torch.zeros(0, dtype=torch.long)
        with torch.no_grad():
            assert kv.step(subset, delta[subset], select=(none, none)).shape == (0, model.config.hidden_size)


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_kv_step_selects_states_when_no_layer_follows_the_edited_one(arch, tok):
    """Edited layer = the last one: no layer runs, ``select`` picks the normed states; an empty pick is [0, d]."""
    model = _model(arch, tok)
    layer_tmp, ln_f_name = _names(arch)
    n_layers = model.config.num_hidden_layers if arch != "gpt2" else model.config.n_layer
    edited = layer_tmp.format(n_layers - 1)
    texts = ["the capital of france is paris", "tokyo is in asia"]
    rows = [tok(t)["input_ids"] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    lookup, end = torch.tensor([2, 1]), mask.sum(1)
    assert KVSuffix.supported(model, edited, "", ln_f_name, width)
    with torch.no_grad(), capture_outputs(model, [edited], stop_after=edited) as out, contextlib.suppress(StopForward):
        model(input_ids=ids, attention_mask=mask)
    hidden = out[edited]
    kv = KVSuffix(model, edited, "", ln_f_name, hidden, mask, lookup, end)
    delta = torch.randn(len(rows), model.config.hidden_size)
    i, t = torch.tensor([0, 1, 0]), torch.tensor([0, 1, 3])
    with torch.no_grad():
        picked = kv.step(torch.arange(len(rows)), delta, select=(i, t))
        empty = kv.step(torch.arange(len(rows)), delta, select=(torch.zeros(0, dtype=torch.long),) * 2)
    shifted = hidden.clone()
    shifted[torch.arange(len(rows)), lookup] += delta
    expected = get_module(model, ln_f_name)(shifted)[i, lookup[i] + t]
    torch.testing.assert_close(picked, expected, rtol=1e-5, atol=1e-6)
    assert empty.shape == (0, model.config.hidden_size)


def _targets(arch, tok, optimizer, loss_layer=-1, **changes):
    model = _model(arch, tok)
    requests = normalize_requests(forget_requests())
    prefixes = context_prefixes(model, tok, 2, 3, 0)
    ids = [target_token_ids(tok, None)] * len(requests)
    cfg = _config(model, arch, loss_layer, optimizer=optimizer, **changes)
    return optimise_neutral_targets(model, tok, requests, ids, prefixes, cfg)


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_adam_on_cached_keys_equals_the_papers_loop(arch, tok):
    """Same Adam updates, clamp and early stop; only the forward is cheaper (float rounding)."""
    paper = _targets(arch, tok, "adam")
    cached = _targets(arch, tok, "adam_kv")
    torch.testing.assert_close(cached.h0, paper.h0, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cached.z, paper.z, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(cached.nll, paper.nll, rtol=1e-3, atol=1e-4)
    assert cached.steps_run == paper.steps_run


def test_chunking_does_not_change_the_targets(tok):
    whole = _targets("llama", tok, "adam_kv")
    chunked = _targets("llama", tok, "adam_kv", chunk_size=1)
    torch.testing.assert_close(chunked.z, whole.z, rtol=1e-4, atol=1e-5)
    assert chunked.steps_run == whole.steps_run


def test_full_forward_fallback_equals_the_cached_step(tok):
    """``reuse_prefix=False`` runs the same optimiser on full forwards of the active rows."""
    fast = _targets("qwen3", tok, "adam_kv", loss_layer=2)
    slow = _targets("qwen3", tok, "adam_kv", loss_layer=2, reuse_prefix=False)
    torch.testing.assert_close(fast.z, slow.z, rtol=1e-3, atol=1e-4)


def test_attention_without_a_scaling_attribute_runs_full_forwards(tok, monkeypatch):
    """Older transformers (< 4.48) name no ``scaling`` on their attention modules: the default adam_kv must not
    fail there; the cached step is not supported and the optimiser evaluates on full forwards (the same targets)."""
    model = _model("llama", tok)
    layer_tmp, ln_f = _names("llama")
    args = (model, layer_tmp.format(1), loss_layer_module(model, -1, layer_tmp), ln_f, 16)
    assert KVSuffix.supported(*args)
    scales = [layer.self_attn.scaling for layer in model.model.layers]
    for layer in model.model.layers:
        del layer.self_attn.scaling
    assert not KVSuffix.supported(*args)
    for layer, scale in zip(model.model.layers, scales):  # (this transformers' own forward needs it back)
        layer.self_attn.scaling = scale
    monkeypatch.setattr(KVSuffix, "supported", staticmethod(lambda *a, **k: False))
    requests = normalize_requests(forget_requests())
    prefixes = context_prefixes(model, tok, 2, 3, 0)
    ids = [target_token_ids(tok, None)] * len(requests)
    cached = optimise_neutral_targets(model, tok, requests, ids, prefixes, _config(model, "llama", optimizer="adam_kv"))
    paper = optimise_neutral_targets(model, tok, requests, ids, prefixes, _config(model, "llama", optimizer="adam"))
    torch.testing.assert_close(cached.z, paper.z, rtol=1e-3, atol=1e-4)
    assert cached.steps_run == paper.steps_run


def test_targets_optimizer_key_is_validated():
    shipped = ZeroUnlearnHyperParams.from_hparams("hparams/ZeroUnlearn/SmolLM2-135M-Instruct.yaml")
    assert shipped.targets_optimizer == "adam_kv"  # the paper's Adam loop on cached prefixes (issue 12's default)
    assert shipped.replace(targets_optimizer="adam").targets_optimizer == "adam"
    with pytest.raises(HParamsError, match="targets_optimizer"):
        shipped.replace(targets_optimizer="sgd")
    with pytest.raises(HParamsError, match=r"'targets_optimizer: lbfgs' was retired: .*use targets_optimizer: adam_kv"):
        shipped.replace(targets_optimizer="lbfgs")


def test_speed_markdown_lists_every_targets_optimizer():
    from zerounlearn_editor.harness.speed_bench import format_speed_markdown

    env = dict(device="cpu", model="m", parameters=1e6, dtype="float32", torch="x", threads=1)
    rows = [
        dict(
            method="ZeroUnlearn",
            n=10,
            targets_optimizer=o,
            edit_s=e,
            edit_cpu_s=e,
            targets_s=e - 1,
            target_nll_mean=nll,
            target_steps_mean=s,
            eval_forget_acc=0.1,
            per_request_over_this=60.0 / e,
            per_request_over_this_cpu=60.0 / e,
        )
        for o, e, nll, s in [("adam", 20.0, 1.05, 24.0), ("adam_kv", 6.0, 0.04, 9.0)]
    ]
    text = format_speed_markdown(dict(environment=env, statistics=[], edits=[], comparisons=[], optimizers=rows))
    assert "| ZeroUnlearn | 10 | adam_kv | 5.0 | 6.0 | 6.0 | 10.00x, 10.00x | 0.040 | 9.0 | 0.10 |" in text
    assert "| ZeroUnlearn | 10 | adam | 19.0 | 20.0 | 20.0 | 3.00x, 3.00x | 1.050 | 24.0 | 0.10 |" in text


# ---------------------------------------------------------------- any architecture: the model's own layers

KV_SUFFIX_ARCHS = {"llama", "mistral", "qwen2", "qwen3", "gpt2"}
"""Architectures of :mod:`arch_zoo` on the hand-written :class:`KVSuffix`; every other one runs :class:`LayerKV`
(the model's own decoder layers with a ``DynamicCache``)."""


def _zoo_model(arch: str, tok, **config_changes):
    model = arch_zoo.tiny_config_model(arch, tok)
    if config_changes:  # rebuild with the changed config (same seed)
        config = model.config
        for key, value in config_changes.items():
            setattr(config, key, value)
        torch.manual_seed(0)
        model = type(model)(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30.0)
    return model


def _zoo_names(model, loss_layer: int = -1):
    t = detect_templates(model)
    return t["layer_module_tmp"], t["ln_f_module"], loss_layer_module(model, loss_layer, t["layer_module_tmp"])


def _full_states(model, layer, ln_f, loss_module, ids, mask, lookup, delta):
    """Final-norm states ``[rows, seq, d]`` of the full forward with ``delta`` added at ``lookup`` after
    ``layer`` (the loss module's output through ``ln_f`` when given)."""
    captured = {}

    def add(_m, _a, out):
        h = hidden_of(out)
        extra = torch.zeros_like(h)
        extra[torch.arange(len(ids)), lookup] = delta
        return (h + extra,) + tuple(out[1:]) if isinstance(out, tuple) else h + extra

    def grab(_m, _a, out):
        h = hidden_of(out)
        captured["h"] = get_module(model, ln_f)(h) if loss_module else h
        raise StopForward

    target = get_module(model, loss_module or ln_f)
    handles = [get_module(model, layer).register_forward_hook(add), target.register_forward_hook(grab)]
    try:
        with torch.no_grad(), contextlib.suppress(StopForward):
            model(input_ids=ids, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    return captured["h"]


def _padded_rows(tok, padding: str):
    texts = ["the capital of france is paris", "i plays piano",
             "many people live in london and it was known for its river", "tokyo is in asia"]
    rows = [tok(t)["input_ids"] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    lookup = torch.zeros(len(rows), dtype=torch.long)
    for i, (r, at) in enumerate(zip(rows, [3, 1, 5, 0])):
        off = width - len(r) if padding == "left" else 0
        ids[i, off : off + len(r)], mask[i, off : off + len(r)] = torch.tensor(r), 1
        lookup[i] = off + 1 + at
    end = mask.sum(1) if padding == "right" else torch.full((len(rows),), width)
    return ids, mask, lookup, end


def _layer_kv_against_full(model, tok, padding: str, loss_layer: int):
    layer_tmp, ln_f, loss_module = _zoo_names(model, loss_layer)
    layer = layer_tmp.format(1)
    ids, mask, lookup, end = _padded_rows(tok, padding)
    assert LayerKV.why_not(model, layer, loss_module, ln_f) is None
    with torch.no_grad(), capture_outputs(model, [layer], stop_after=layer) as out, contextlib.suppress(StopForward):
        model(input_ids=ids, attention_mask=mask)
    kv = LayerKV(model, layer, loss_module, ln_f, out[layer], mask, lookup, end)
    torch.manual_seed(0)
    delta = torch.randn(len(ids), model.config.hidden_size) * 3.0
    full = _full_states(model, layer, ln_f, loss_module, ids, mask, lookup, delta)
    assert kv.mismatch(_full_states(model, layer, ln_f, loss_module, ids, mask, lookup, delta * 0)) is None
    for subset in (torch.arange(len(ids)), torch.tensor([2, 0])):
        with torch.no_grad():
            fast = kv.step(subset, delta[subset])
        for k, r in enumerate(subset.tolist()):
            torch.testing.assert_close(fast[k, : int(end[r] - lookup[r])], full[r, lookup[r] : end[r]],
                                       rtol=1e-4, atol=1e-5)
        i, t = torch.tensor([0, 1, 1]), torch.tensor([0, 0, int(end[subset[1]] - lookup[subset[1]]) - 1])
        with torch.no_grad():
            picked = kv.step(subset, delta[subset], select=(i, t))
        expected = torch.stack([full[int(subset[k]), int(lookup[subset[k]] + p)] for k, p in zip(i, t)])
        torch.testing.assert_close(picked, expected, rtol=1e-4, atol=1e-5)
    return kv


@pytest.mark.parametrize("arch", sorted(arch_zoo.ARCHS))
@pytest.mark.parametrize("padding", ["right", "left"])
def test_layer_kv_step_equals_the_full_forward_on_every_architecture(arch, padding, tok):
    """The model's own layers with a cache of the prefix: every position from the lookup on matches the full
    forward with the delta added there (rows of different lengths, a sub-batch, selected positions)."""
    _layer_kv_against_full(_zoo_model(arch, tok), tok, padding, -1)


@pytest.mark.parametrize("arch", ["gemma3", "gpt2", "falcon"])
def test_layer_kv_stops_at_the_loss_layer(arch, tok):
    kv = _layer_kv_against_full(_zoo_model(arch, tok), tok, "right", 2)
    assert len(kv.layers) == 1


@pytest.mark.parametrize("arch", ["gemma3", "gemma2"])
def test_layer_kv_keeps_each_layers_sliding_window(arch, tok):
    """Gemma-2/3 with a window shorter than the rows: sliding and full layers alternate by layer index, and each
    layer gets its own mask (a shared causal mask would differ from the full forward)."""
    types = ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]
    model = _zoo_model(arch, tok, sliding_window=3, layer_types=types)
    kv = _layer_kv_against_full(model, tok, "right", -1)
    assert kv.windows == [None, 3]  # layers 2 (full) and 3 (sliding) after the edited layer 1


def _spy_paths(monkeypatch):
    used = []
    for cls in (KVSuffix, LayerKV):
        original = cls.step

        def step(self, *args, _original=original, _name=cls.__name__, **kwargs):
            used.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "step", step)
    return used


def _zoo_targets(model, tok, optimizer: str):
    layer_tmp, ln_f, loss_module = _zoo_names(model)
    requests = normalize_requests(forget_requests())
    prefixes = context_prefixes(model, tok, 2, 3, 0)
    ids = [target_token_ids(tok, None)] * len(requests)
    cfg = TargetConfig(
        layer_module=layer_tmp.format(1), ln_f_module=ln_f, lm_head_module=detect_templates(model)["lm_head_module"],
        loss_layer_module=loss_module, fact_token="subject_last", steps=12, lr=0.5, weight_decay=1e-3,
        clamp_norm_factor=4.0, kl_factor=0.1, early_stop_loss=0.05, chunk_size=8, optimizer=optimizer,
    )
    return optimise_neutral_targets(model, tok, requests, ids, prefixes, cfg)


@pytest.mark.parametrize("arch", sorted(arch_zoo.ARCHS))
def test_adam_kv_takes_a_cached_path_on_every_architecture(arch, tok, monkeypatch, caplog):
    """``adam_kv`` evaluates on a cache on all 15 architectures (the hand-written :class:`KVSuffix` on the Llama
    family and GPT-2, the model's own layers elsewhere), logs no fallback, and gives the full-forward ``adam``
    loop's targets."""
    model = _zoo_model(arch, tok)
    used = _spy_paths(monkeypatch)
    with caplog.at_level("INFO", logger="zerounlearn_editor.engine.targets.kv_suffix"):
        cached = _zoo_targets(model, tok, "adam_kv")
    assert set(used) == {"KVSuffix" if arch in KV_SUFFIX_ARCHS else "LayerKV"}
    assert not [r for r in caplog.records if "no KV-cached evaluation" in r.getMessage()]
    paper = _zoo_targets(model, tok, "adam")
    torch.testing.assert_close(cached.h0, paper.h0, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cached.z, paper.z, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(cached.nll, paper.nll, rtol=1e-3, atol=1e-4)
    assert cached.steps_run == paper.steps_run


def test_layers_that_differ_from_the_full_forward_fall_back_with_the_reason(tok, monkeypatch, caplog):
    """A window the cached layers cannot read (here: hidden from them) makes the step differ from the full
    forward at ``delta = 0``: ``adam_kv`` logs why once and runs full forwards, with the ``adam`` targets."""
    types = ["sliding_attention"] * 4
    model = _zoo_model("gemma3", tok, sliding_window=2, layer_types=types)
    monkeypatch.setattr(layer_kv, "_sliding_window", lambda layer: None)
    used = _spy_paths(monkeypatch)
    with caplog.at_level("INFO", logger="zerounlearn_editor.engine.targets.kv_suffix"):
        cached = _zoo_targets(model, tok, "adam_kv")
        _zoo_targets(model, tok, "adam_kv")
    assert used == ["LayerKV", "LayerKV"]  # per run only the check at delta = 0, never a step of the optimiser
    notes = [r.getMessage() for r in caplog.records if "no KV-cached evaluation" in r.getMessage()]
    assert len(notes) == 1 and "gemma3_text" in notes[0] and "differ from the full forward at delta = 0" in notes[0]
    paper = _zoo_targets(model, tok, "adam")
    torch.testing.assert_close(cached.z, paper.z, rtol=1e-4, atol=1e-5)
    assert cached.steps_run == paper.steps_run


def test_layouts_the_cached_layers_cannot_call_are_named():
    model = arch_zoo.tiny_config_model("falcon")
    model.config.alibi = True
    assert "ALiBi" in LayerKV.why_not(model, "transformer.h.1", "", "transformer.ln_f")
    assert "not an item of a layer list" in LayerKV.why_not(model, "transformer.ln_f", "", "transformer.ln_f")
    model.config.alibi = False
    model.config._attn_implementation = "flash_attention_2"
    assert "takes no 4D mask" in LayerKV.why_not(model, "transformer.h.1", "", "transformer.ln_f")


@pytest.mark.slow
def test_real_gemma3_layers_on_the_cache_equal_the_full_forward(gemma3_path):
    """Gemma-3-270m (18 layers, sliding and full attention, two rotary settings): the layers after layer 5 on a
    cache of the prefix give the full forward's final-norm states with a delta added at the lookup token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gemma3_path)
    model = AutoModelForCausalLM.from_pretrained(gemma3_path, dtype=torch.float32).eval()
    assert {"sliding_attention", "full_attention"} <= set(model.config.layer_types)
    texts = ["The Eiffel Tower is in the city of Paris", "The capital of Japan is"]
    encoded = tok(texts, padding=True, return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    assert tok.padding_side == "left"
    lookup = torch.tensor([3, ids.shape[1] - 2])  # " Tower"; " Japan" (the short row is left-padded)
    end = torch.full((2,), ids.shape[1])
    assert tok.convert_ids_to_tokens([int(ids[0, 3]), int(ids[1, -2])]) == ["\u2581Tower", "\u2581Japan"]
    layer, ln_f, loss_module = "model.layers.5", "model.norm", ""
    assert LayerKV.why_not(model, layer, loss_module, ln_f) is None
    with torch.no_grad(), capture_outputs(model, [layer], stop_after=layer) as out, contextlib.suppress(StopForward):
        model(input_ids=ids, attention_mask=mask)
    kv = LayerKV(model, layer, loss_module, ln_f, out[layer], mask, lookup, end)
    torch.manual_seed(0)
    delta = torch.randn(2, model.config.hidden_size) * out[layer].norm(dim=-1).mean() / 10
    full = _full_states(model, layer, ln_f, loss_module, ids, mask, lookup, delta)
    assert kv.mismatch(_full_states(model, layer, ln_f, loss_module, ids, mask, lookup, delta * 0)) is None
    with torch.no_grad():
        fast = kv.step(torch.arange(2), delta)
    for r in range(2):
        expected = full[r, lookup[r] : end[r]]
        torch.testing.assert_close(fast[r, : int(end[r] - lookup[r])], expected, rtol=1e-3,
                                   atol=1e-4 * float(expected.abs().max()))


def test_check_rows_are_the_extremes_of_prefix_span_and_padding():
    start = torch.tensor([3, 5, 2, 4, 4, 3])
    end = torch.tensor([9, 6, 4, 12, 5, 4])
    mask = torch.ones(6, 12, dtype=torch.long)
    mask[4, :7] = 0  # row 4: the most padding
    picked = layer_kv.check_rows(start, end, mask)
    assert picked.tolist() == [1, 2, 3, 4]  # longest prefix 1, shortest 2, longest span 3 (8 positions), padding 4
    assert layer_kv.check_rows(start[:1], end[:1], mask[:1]).tolist() == [0]
    assert layer_kv.check_rows(start[:0], end[:0], mask[:0]).numel() == 0


def test_the_delta_zero_check_runs_the_full_forward_of_a_few_rows_only(tok, monkeypatch):
    """The check at ``delta = 0`` compares the check rows, not the full forward of every row of the chunk (the
    largest fixed cost of Gemma's targets), and the targets stay those of the full-forward ``adam`` loop."""
    model = _zoo_model("gemma3", tok)
    checked = []
    original = LayerKV.mismatch

    def mismatch(self, reference, rows=None):
        checked.append((reference.shape[0], self.hidden.shape[0]))
        return original(self, reference, rows)

    monkeypatch.setattr(LayerKV, "mismatch", mismatch)
    cached = _zoo_targets(model, tok, "adam_kv")
    assert checked and all(n_ref <= layer_kv.CHECK_ROWS < n_rows for n_ref, n_rows in checked)
    paper = _zoo_targets(model, tok, "adam")
    torch.testing.assert_close(cached.z, paper.z, rtol=1e-3, atol=1e-4)
