"""Finding modules by template, reading/writing edited weights (always as ``W`` ``[d_out, d_in]``, GPT-2's
``Conv1D`` transposed here) and capturing activations."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
from torch import nn


class ModuleNotFoundInModel(ValueError):
    """A module template does not match any module of the model."""


class StopForward(Exception):
    """Raised by a hook to end a forward pass early once everything needed is captured."""


def get_module(model: nn.Module, name: str) -> nn.Module:
    """The submodule called ``name``; raises :class:`ModuleNotFoundInModel` naming it."""
    modules = dict(model.named_modules())
    if name not in modules:
        close = [n for n in modules if n.split(".")[-1] == name.split(".")[-1]][:3]
        hint = f" (modules with that last name: {close})" if close else ""
        raise ModuleNotFoundInModel(f"module {name!r} not found in {type(model).__name__}{hint}")
    return modules[name]


def module_is_transposed(module: nn.Module) -> bool:
    """True for GPT-2 style ``Conv1D`` whose weight is stored ``[d_in, d_out]``."""
    return type(module).__name__ == "Conv1D"


def parameter_name_of_weight(model: nn.Module, module_name: str) -> str:
    """The exact ``named_parameters()`` name of the module's weight."""
    module = get_module(model, module_name)
    if not isinstance(getattr(module, "weight", None), torch.Tensor):
        raise ModuleNotFoundInModel(f"module {module_name!r} has no weight tensor")
    return f"{module_name}.weight"


def get_weight_matrix(module: nn.Module) -> torch.Tensor:
    """The weight as ``W`` ``[d_out, d_in]`` (a view; do not modify in place)."""
    weight = module.weight
    return weight.t() if module_is_transposed(module) else weight


@torch.no_grad()
def set_weight_matrix(module: nn.Module, new_weight: torch.Tensor) -> None:
    """Write ``new_weight`` ``[d_out, d_in]`` into the module, in its dtype and device."""
    target = module.weight
    value = new_weight.t() if module_is_transposed(module) else new_weight
    if value.shape != target.shape:
        raise ValueError(f"new weight has shape {tuple(value.shape)}, module expects {tuple(target.shape)}")
    target.copy_(value.to(device=target.device, dtype=target.dtype))


def _config_int(config: Any, names: Sequence[str], text_config_name: str) -> Optional[int]:
    """The first integer config attribute of ``names``, else ``config.text_config``'s ``text_config_name``."""
    for attr in names:
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    value = getattr(getattr(config, "text_config", None), text_config_name, None)
    return value if isinstance(value, int) else None


def num_hidden_layers(model: nn.Module) -> int:
    """Number of transformer blocks, from the config."""
    value = _config_int(model.config, ("num_hidden_layers", "n_layer", "num_layers"), "num_hidden_layers")
    if value is None:
        raise ValueError(f"cannot tell the number of layers of {type(model).__name__} from its config")
    return value


def check_layers(model: nn.Module, layers: Sequence[int], module_tmp: str) -> None:
    """Every layer index is in range and its module exists (errors name the layer)."""
    total = num_hidden_layers(model)
    for layer in layers:
        if not 0 <= layer < total:
            raise ValueError(f"layer {layer} is out of range: the model has {total} layers (0..{total - 1})")
        get_module(model, module_tmp.format(layer))


def hidden_size_of(model: nn.Module) -> Optional[int]:
    """The residual stream's width ``d_model`` from the config (``hidden_size`` / ``n_embd`` / ``d_model``), or None."""
    return _config_int(getattr(model, "config", None), ("hidden_size", "n_embd", "d_model"), "hidden_size")


def check_edited_modules(
    model: nn.Module, layers: Sequence[int], module_tmp: str, key: str = "rewrite_module_tmp"
) -> None:
    """Every edited module exists and holds a 2-D weight ``[hidden_size, d_in]`` (it writes into the residual
    stream); errors name the key, the module and the shapes."""
    check_layers(model, layers, module_tmp)
    hidden = hidden_size_of(model)
    for layer in layers:
        name = module_tmp.format(layer)
        module = get_module(model, name)
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise ModuleNotFoundInModel(
                f"key {key!r}: module {name!r} ({type(module).__name__}) has no 2-D weight to edit; "
                "name the MLP's output projection (e.g. model.layers.{}.mlp.down_proj)"
            )
        d_out = get_weight_matrix(module).shape[0]
        if hidden is not None and d_out != hidden:
            raise ModuleNotFoundInModel(
                f"key {key!r}: module {name!r} maps to {d_out} features, but the hidden size is {hidden}: the edited "
                "weight must write into the residual stream (the MLP's output projection, e.g. down_proj / c_proj)"
            )


def logits_transform(model: nn.Module) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """What the model does to ``lm_head``'s output before returning logits, or None: Granite divides by
    ``logits_scaling``, Cohere multiplies by ``logit_scale``, Gemma-2/3 cap (``cap * tanh(z / cap)``)."""
    def number(name: str) -> Optional[float]:
        value = getattr(getattr(model, "config", None), name, None)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    divide, multiply, cap = number("logits_scaling"), number("logit_scale"), number("final_logit_softcapping")
    candidates = ((lambda z: z / divide, divide not in (None, 1.0)),
                  (lambda z: z * multiply, multiply not in (None, 1.0)),
                  (lambda z: torch.tanh(z / cap) * cap, cap is not None and cap > 0))
    steps = [step for step, used in candidates if used]
    if not steps:
        return None

    def transform(logits: torch.Tensor) -> torch.Tensor:
        for step in steps:
            logits = step(logits)
        return logits

    return transform


def max_positions(model: nn.Module) -> Optional[int]:
    """The longest sequence the model's position embeddings allow, or ``None`` if unbounded (rotary)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", "") in ("gpt2", "gpt_neo", "gptj", "opt", "bloom", "gpt_bigcode"):
        for attr in ("n_positions", "max_position_embeddings"):
            value = getattr(config, attr, None)
            if isinstance(value, int):
                return value
    value = getattr(config, "n_positions", None)
    return value if isinstance(value, int) else None


def module_device(module: nn.Module, fallback: torch.device) -> torch.device:
    """Device of a module's first parameter (where its inputs must be), else ``fallback``."""
    param = next(module.parameters(), None)
    return param.device if param is not None else fallback


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's input embeddings (where input ids must go, also under a device map)."""
    try:
        return model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return next(model.parameters()).device


def probe_ids(model: nn.Module, rows: int) -> torch.Tensor:
    """A probe batch ``[rows, 8]`` of token ids ``3..10`` (within the vocabulary) on the input device."""
    vocab = model.get_input_embeddings().weight.shape[0]
    return (torch.arange(3, 11) % vocab)[None].expand(rows, -1).to(model_device(model))


def hidden_of(output) -> torch.Tensor:
    """The hidden-state tensor of a module output (decoder layers may return tuples)."""
    return output[0] if isinstance(output, (tuple, list)) else output


def unflatten_tokens(value: torch.Tensor, rows_seq: Optional[tuple]) -> torch.Tensor:
    """``value`` as ``[rows, seq, d]``: blocks that flatten the tokens before their MLP (OPT: ``[rows * seq, d]``)
    are viewed back to the batch's shape; any other tensor is returned as is."""
    if rows_seq is not None and value.dim() == 2 and value.shape[0] == rows_seq[0] * rows_seq[1]:
        return value.view(rows_seq[0], rows_seq[1], value.shape[1])
    return value


@contextlib.contextmanager
def _capture(model: nn.Module, module_names: Sequence[str], stop_after: Optional[str],
             inputs: bool) -> Iterator[Dict[str, torch.Tensor]]:
    captured: Dict[str, torch.Tensor] = {}
    handles: List[torch.utils.hooks.RemovableHandle] = []
    batch_shape: Dict[str, tuple] = {}

    def note_shape(_m, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if isinstance(ids, torch.Tensor) and ids.dim() >= 2:
            batch_shape["rows_seq"] = tuple(ids.shape[:2])

    def record(name: str, value: torch.Tensor) -> None:
        captured[name] = unflatten_tokens(value.detach(), batch_shape.get("rows_seq"))
        if name == stop_after:
            raise StopForward

    try:
        handles.append(model.register_forward_pre_hook(note_shape, with_kwargs=True))
        for name in module_names:
            module = get_module(model, name)
            if inputs:
                hook = lambda _m, args, name=name: record(name, args[0])  # noqa: E731
                handles.append(module.register_forward_pre_hook(hook))
            else:
                hook = lambda _m, _a, out, name=name: record(name, hidden_of(out))  # noqa: E731
                handles.append(module.register_forward_hook(hook))
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def capture_inputs(model: nn.Module, module_names: Sequence[str], stop_after: Optional[str] = None):
    """A context manager yielding ``{name: first positional input [batch, seq, d_in]}`` (detached), filled on
    each forward; after capturing ``stop_after`` the forward raises :class:`StopForward` (suppress it around
    the call)."""
    return _capture(model, module_names, stop_after, inputs=True)


def capture_outputs(model: nn.Module, module_names: Sequence[str], stop_after: Optional[str] = None):
    """Record the hidden-state output ``[batch, seq, d]`` of each named module, like :func:`capture_inputs`."""
    return _capture(model, module_names, stop_after, inputs=False)
