"""Retain-aware neutral targets (opt-in target_retain_weight): maths, plumbing, and the paper's path unchanged."""
from __future__ import annotations

import copy

import pytest
import torch

from tiny_models import forget_requests, sharp_tiny_llama, tiny_gd_target_hparams, tiny_tokenizer
from zerounlearn_editor.encoding import encode_rows
from zerounlearn_editor.hparams import HParamsError
from zerounlearn_editor.pipeline import batched_statistics, neutral_targets, target_settings
from zerounlearn_editor.retain import normalize_retain
from zerounlearn_editor.targets import nearest_retain
from zerounlearn_editor.zerounlearn_gd_main import apply_zerounlearn_gd_to_model

RETAIN = [
    {"prompt": "the capital of spain is", "subject": "spain"},
    {"prompt": "the capital of italy is", "subject": "italy"},
    {"prompt": "the capital of china is", "subject": "china"},
    {"prompt": "the language of brazil is", "subject": "brazil"},
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _transfer_kl(model, tok, hp, delta: torch.Tensor, retain_request, scale: float) -> float:
    """KL(p(. | r, scale * delta) || p(. | r)) at the retain prompt's last token, delta at its subject token."""
    (r,) = normalize_retain([retain_request])
    batch = encode_rows(tok, [""], [r.prefix], [r.subject], [r.suffix], hp.fact_token)
    layer = model.model.layers[hp.layers[-1]]

    def add(_m, _a, out):
        h = out[0] if isinstance(out, tuple) else out
        h = h.clone()
        h[0, int(batch.lookup[0])] += scale * delta
        return (h,) + tuple(out[1:]) if isinstance(out, tuple) else h

    with torch.no_grad():
        base = torch.log_softmax(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[0, -1], -1)
        handle = layer.register_forward_hook(add)
        try:
            new = torch.log_softmax(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[0, -1], -1)
        finally:
            handle.remove()
    return float((new.exp() * (new - base)).sum())


def test_nearest_retain_orders_by_cosine_and_checks_shapes():
    forget = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    retain = torch.tensor([[0.0, 1.0], [3.0, 0.1], [1.0, 1.0], [-1.0, 0.0]])
    assert nearest_retain(forget, retain, 2).tolist() == [[1, 2], [0, 2]]
    assert nearest_retain(forget, retain, 9).shape == (2, 4)  # at most r neighbours
    with pytest.raises(ValueError, match=r"\[n, d\]"):
        nearest_retain(forget, retain[:, :1], 2)
    with pytest.raises(ValueError, match="m must be"):
        nearest_retain(forget, retain, 0)


def test_hparams_validate_the_retain_aware_target_keys(tmp_path):
    for changes, match in (
        (dict(target_retain_weight=-1.0), "target_retain_weight"),
        (dict(target_retain_neighbours=0), "target_retain_neighbours"),
        (dict(target_retain_scale=0.0), "target_retain_scale"),
        (dict(target_retain_scale=1.5), "target_retain_scale"),
        (dict(target_retain_weight=1.0, targets_optimizer="lbfgs"), "targets_optimizer: adam"),
    ):
        with pytest.raises(HParamsError, match=match):
            tiny_gd_target_hparams(tmp_path, **changes)
    hp = tiny_gd_target_hparams(tmp_path, target_retain_weight=2.0)
    assert hp.retain_set_weights()["target_retain_weight"] == 2.0


def test_target_settings_name_the_retain_keys_only_when_used(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    paper = target_settings(model, tiny_gd_target_hparams(tmp_path))
    assert not any(key.startswith("retain_") for key in paper)  # the paper's settings, unchanged keys
    aware = target_settings(model, tiny_gd_target_hparams(tmp_path, target_retain_weight=2.0))
    assert aware["retain_weight"] == 2.0 and aware["retain_neighbours"] == 5 and aware["retain_scale"] == 0.5


def test_weight_zero_ignores_the_retain_set_bit_for_bit(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    hp = tiny_gd_target_hparams(tmp_path)
    plain = neutral_targets(model, tok, forget_requests(), hp)
    with_retain = neutral_targets(model, tok, forget_requests(), hp, retain=RETAIN)
    assert torch.equal(plain.z, with_retain.z)


def test_retain_aware_targets_carry_less_over_to_the_neighbours(tok, tmp_path):
    model = sharp_tiny_llama(tok)
    scale = 0.5
    kls = {}
    for weight in (0.0, 20.0):
        hp = tiny_gd_target_hparams(tmp_path, target_retain_weight=weight, target_retain_neighbours=2, target_retain_scale=scale)
        targets = neutral_targets(model, tok, forget_requests(), hp, retain=RETAIN)
        delta = targets.z - targets.h0
        kls[weight] = sum(_transfer_kl(model, tok, hp, d, r, scale) for d in delta for r in RETAIN)
        if weight:
            # still pushes towards the neutral target: the NLL fell from its unedited value
            assert float(targets.nll.mean()) < float(neutral_targets(model, tok, forget_requests(), tiny_gd_target_hparams(tmp_path, v_num_grad_steps=0)).nll.mean())
    assert kls[20.0] < 0.5 * kls[0.0], kls


def test_the_edit_hands_its_retain_set_to_the_targets(tok, tmp_path):
    base = sharp_tiny_llama(tok)
    edited = {}
    for weight in (0.0, 20.0):
        # retain_nullspace_weight 0: the retain set acts through the targets alone (accepted, not "ignored")
        hp = tiny_gd_target_hparams(tmp_path, target_retain_weight=weight, target_retain_neighbours=2)
        model = copy.deepcopy(base)
        moments = batched_statistics(model, tok, hp, hp.mom2_dataset, progress=False)
        if weight == 0.0:
            with pytest.raises(ValueError, match="would be ignored"):
                apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, second_moments=moments,
                                              retain=RETAIN, progress=False)
            apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, second_moments=moments, progress=False)
        else:
            apply_zerounlearn_gd_to_model(model, tok, forget_requests(), hp, second_moments=moments,
                                          retain=RETAIN, progress=False)
        edited[weight] = model.model.layers[2].mlp.down_proj.weight.detach().clone()
    assert not torch.equal(edited[0.0], edited[20.0])


def test_the_per_request_reference_takes_the_retain_set_too(tok, tmp_path):
    from zerounlearn_editor.contexts import context_prefixes
    from zerounlearn_editor.encoding import target_token_ids
    from zerounlearn_editor.pipeline import _target_config
    from zerounlearn_editor.reference_pipeline import per_request_targets

    model = sharp_tiny_llama(tok)
    hp = tiny_gd_target_hparams(tmp_path, target_retain_weight=20.0, target_retain_neighbours=2)
    forget = normalize_retain(forget_requests())  # prompts + subjects; the neutral target is EOS either way
    ids = [target_token_ids(tok, hp.neutral_target) for _ in forget]
    prefixes = context_prefixes(model, tok, hp.context_template_count, hp.context_template_length, hp.context_seed)
    cfg = _target_config(model, hp)
    plain = per_request_targets(model, tok, forget, ids, prefixes, cfg)
    aware = per_request_targets(model, tok, forget, ids, prefixes, cfg, normalize_retain(RETAIN))
    assert aware.z.shape == plain.z.shape and not torch.equal(aware.z, plain.z)


def test_cached_adam_runs_the_adam_loop_for_retain_aware_targets(tok, tmp_path):
    """``adam_kv`` (the default) has no transfer rows: retain-aware targets run the Adam loop, bit for bit."""
    model = sharp_tiny_llama(tok)
    hp = tiny_gd_target_hparams(tmp_path, target_retain_weight=20.0, target_retain_neighbours=2, targets_optimizer="adam")
    paper = neutral_targets(model, tok, forget_requests(), hp, retain=RETAIN)
    cached = neutral_targets(model, tok, forget_requests(), hp.replace(targets_optimizer="adam_kv"), retain=RETAIN)
    assert torch.equal(cached.z, paper.z) and cached.steps_run == paper.steps_run
    without = neutral_targets(model, tok, forget_requests(), hp.replace(target_retain_weight=0.0), retain=RETAIN)
    assert not torch.equal(without.z, paper.z)  # the retain term was used
    # one loop, one cache key (the paper's targets keep their optimiser in the key: adam and adam_kv differ in rounding)
    assert target_settings(model, hp) == target_settings(model, hp.replace(targets_optimizer="adam_kv"))
    plain = hp.replace(target_retain_weight=0.0)
    assert target_settings(model, plain) != target_settings(model, plain.replace(targets_optimizer="adam_kv"))
