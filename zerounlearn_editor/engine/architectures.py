"""Module-name templates of any Hugging Face decoder-only causal LM, found from the loaded model's structure.

The decoder layers are the ``nn.ModuleList`` of ``num_hidden_layers`` blocks of one class; a block's
attention and MLP are its children named or typed like one (OPT keeps its MLP's linear layers in the block);
the edited weight is the MLP's ``d_ff -> d_model`` output projection; the final norm is the norm outside the
blocks that reads the last block's output (one short forward pass); head and embeddings come from
``get_output_embeddings()`` / ``get_input_embeddings()``. What cannot be found, or a mixture-of-experts MLP,
raises :class:`UnsupportedArchitecture` naming it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.support.model_access import (
    get_weight_matrix,
    hidden_of,
    hidden_size_of,
    module_is_transposed,
    num_hidden_layers,
    probe_ids,
)

_ATTN_NAMES = ("self_attn", "attn", "attention", "self_attention")
_MLP_NAMES = ("mlp", "feed_forward", "ffn", "ff", "mlp_block", "feedforward")


class UnsupportedArchitecture(ValueError):
    """The loaded model's structure lacks something the edit needs (the message names it)."""


def _is_linear(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (isinstance(module, nn.Linear) or module_is_transposed(module)) and isinstance(weight, torch.Tensor) \
        and weight.dim() == 2


def is_norm(module: nn.Module, hidden: int) -> bool:
    """A norm module (by class name) with a 1-D weight of width ``hidden``."""
    weight = getattr(module, "weight", None)
    named = "norm" in type(module).__name__.lower() or isinstance(module, nn.LayerNorm)
    return named and isinstance(weight, torch.Tensor) and weight.dim() == 1 and weight.shape[0] == hidden


def _child_named(layer: nn.Module, names: Tuple[str, ...], markers: Tuple[str, ...]) -> Optional[str]:
    children = dict(layer.named_children())
    for name in names:
        if name in children:
            return name
    for name, child in children.items():
        if any(m in type(child).__name__.lower() for m in markers):
            return name
    return None


def _check_not_moe(layer: nn.Module, where: str) -> None:
    for name, module in layer.named_modules():
        leaf = name.split(".")[-1].lower()
        kind = type(module).__name__.lower()
        if leaf in ("experts", "block_sparse_moe", "router", "moe") or any(m in kind for m in ("moe", "experts")):
            raise UnsupportedArchitecture(
                f"{where}: mixture-of-experts MLPs are not supported ({name or 'the block'} is a "
                f"{type(module).__name__}): ZeroUnlearn edits one dense MLP output projection per layer")


def _output_projection(container: nn.Module, prefix: str, hidden: int, skip: Tuple[str, ...]) -> str:
    """The last ``d_ff -> d_model`` linear module under ``container`` (names under ``skip`` excluded)."""
    candidates = []
    for name, module in container.named_modules():
        if not name or any(name == s or name.startswith(s + ".") for s in skip) or not _is_linear(module):
            continue
        d_out, d_in = get_weight_matrix(module).shape
        if d_out == hidden:
            candidates.append((d_in != hidden, name))
    if not candidates:
        raise UnsupportedArchitecture(
            f"no MLP output projection (a linear map d_ff -> d_model = {hidden}) under {prefix!r}"
        )
    widest = [name for wide, name in candidates if wide] or [name for _, name in candidates]
    return f"{prefix}.{widest[-1]}"


def _name_of(model: nn.Module, target: Optional[nn.Module]) -> Optional[str]:
    if target is None:
        return None
    return next((name for name, module in model.named_modules() if module is target), None)


@torch.no_grad()
def _final_norm(model: nn.Module, layers_name: str, last_layer: nn.Module, hidden: int) -> str:
    """The norm outside the blocks whose input is the last block's output (one short forward pass)."""
    inside = layers_name + "."
    candidates = {name: m for name, m in model.named_modules()
                  if name and not name.startswith(inside) and is_norm(m, hidden)}
    if not candidates:
        raise UnsupportedArchitecture(
            f"{type(model).__name__}: no final norm (a norm of size {hidden} outside the blocks)"
        )
    if any(t.is_meta for t in list(model.parameters()) + list(model.buffers())):
        return _final_norm_of_structure(model, layers_name, candidates)
    seen: Dict[str, torch.Tensor] = {}
    handles = [last_layer.register_forward_hook(lambda _m, _a, out: seen.__setitem__("last", hidden_of(out)))]
    for name, module in candidates.items():
        handles.append(module.register_forward_pre_hook(lambda _m, args, name=name: seen.__setitem__(name, args[0])))
    try:
        with eval_mode(model):
            model(input_ids=probe_ids(model, 1))
    finally:
        for handle in handles:
            handle.remove()
    last = seen.get("last")
    for name in candidates:
        value = seen.get(name)
        if last is not None and value is not None and value.shape == last.shape and torch.equal(value, last):
            return name
    raise UnsupportedArchitecture(
        f"{type(model).__name__}: none of the norms outside the blocks ({sorted(candidates)}) reads the last block's "
        "output"
    )


def _final_norm_of_structure(model: nn.Module, layers_name: str, candidates: Dict[str, nn.Module]) -> str:
    """The final norm of a model whose weights are on the ``meta`` device (no values, so no forward pass to follow):
    the only norm outside the blocks, else the only one registered after them (embedding norms come before)."""
    if len(candidates) == 1:
        return next(iter(candidates))
    names = [name for name, _ in model.named_modules()]
    after = [name for name in candidates if names.index(name) > names.index(layers_name)]
    if len(after) == 1:
        return after[0]
    raise UnsupportedArchitecture(
        f"{type(model).__name__}: the weights are on the meta device, so the final norm cannot be told apart "
        f"among {sorted(candidates)} by a forward pass; load the model's weights (not under init_empty_weights)")


def detect_templates(model: nn.Module) -> Dict[str, Any]:
    """The module-name templates of ``model`` (``attn_module_tmp`` / ``embed_module``: causal tracing only),
    ``"family"`` (``config.model_type``) and ``"num_layers"``. A model on the ``meta`` device (built under
    ``init_empty_weights``) is read from its structure alone; an encoder-decoder model is refused."""
    model_type = str(getattr(getattr(model, "config", None), "model_type", "") or type(model).__name__)
    where = f"{model_type} ({type(model).__name__})"
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        raise UnsupportedArchitecture(f"{where}: encoder-decoder models are not supported; ZeroUnlearn edits "
                                      "decoder-only causal language models")
    try:
        n_layers = num_hidden_layers(model)
    except (ValueError, AttributeError) as exc:
        raise UnsupportedArchitecture(f"{where}: {exc}") from exc
    hidden = hidden_size_of(model)
    if hidden is None:
        raise UnsupportedArchitecture(f"{where}: the config gives no hidden size (hidden_size / n_embd / d_model)")
    # the decoder layers: the outermost ModuleList of n_layers blocks of one class
    found = [name for name, module in model.named_modules()
             if isinstance(module, nn.ModuleList) and len(module) == n_layers and n_layers > 0
             and len({type(m) for m in module}) == 1 and sum(1 for _ in module[0].parameters()) > 0]
    if not found:
        raise UnsupportedArchitecture(f"{model_type}: {type(model).__name__}: no list of {n_layers} decoder "
                                      "blocks (the config's number of layers) was found")
    layers_name = min(found, key=lambda name: name.count("."))
    layers = dict(model.named_modules())[layers_name]
    layer0 = layers[0]
    _check_not_moe(layer0, where)
    attn = _child_named(layer0, _ATTN_NAMES, ("attention", "attn"))
    if attn is None:
        raise UnsupportedArchitecture(f"{where}: no attention module in the block {layers_name}.0 "
                                      f"(children: {[n for n, _ in layer0.named_children()]})")
    mlp = _child_named(layer0, _MLP_NAMES, ("mlp", "feedforward"))
    block = f"{layers_name}.{{}}"
    try:
        if mlp is not None:
            rewrite = _output_projection(getattr(layer0, mlp), f"{block}.{mlp}", hidden, ())
            mlp_tmp = f"{block}.{mlp}"
        else:  # the block holds its MLP's linear layers directly (OPT: fc1, fc2)
            rewrite = _output_projection(layer0, block, hidden, (attn,))
            mlp_tmp = rewrite  # the output projection's output is the MLP's output
    except UnsupportedArchitecture as exc:
        raise UnsupportedArchitecture(f"{where}: {exc}") from None
    head = _name_of(model, model.get_output_embeddings())
    if head is None or not _is_linear(dict(model.named_modules())[head]):
        raise UnsupportedArchitecture(
            f"{where}: no output head (get_output_embeddings() is not a linear module of the model)"
        )
    embed = _name_of(model, model.get_input_embeddings())
    if embed is None:
        raise UnsupportedArchitecture(f"{where}: no input embeddings (get_input_embeddings())")
    ln_f = _final_norm(model, layers_name, layers[n_layers - 1], hidden)
    return {
        "rewrite_module_tmp": rewrite,
        "layer_module_tmp": block,
        "mlp_module_tmp": mlp_tmp,
        "attn_module_tmp": f"{block}.{attn}",
        "ln_f_module": ln_f,
        "lm_head_module": head,
        "embed_module": embed,
        "family": model_type,
        "num_layers": n_layers,
    }
