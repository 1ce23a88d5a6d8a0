"""Finding modules by template, reading/writing edited weights, and capturing activations.

Edited weights are always handled in the *mathematical* orientation ``W`` ``[d_out, d_in]``
(``value = W @ key``). ``nn.Linear`` stores exactly that; GPT-2's ``Conv1D`` stores the
transpose ``[d_in, d_out]`` and is converted here, so no caller has to care.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Optional, Sequence

import torch
from torch import nn

__all__ = [
    "ModuleNotFoundInModel",
    "StopForward",
    "get_module",
    "parameter_name_of_weight",
    "module_is_transposed",
    "get_weight_matrix",
    "set_weight_matrix",
    "num_hidden_layers",
    "check_layers",
    "check_edited_modules",
    "max_positions",
    "capture_inputs",
    "capture_outputs",
    "hidden_of",
    "model_device",
]


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


def num_hidden_layers(model: nn.Module) -> int:
    """Number of transformer blocks, from the config."""
    config = model.config
    for attr in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    text_config = getattr(config, "text_config", None)
    if text_config is not None and isinstance(getattr(text_config, "num_hidden_layers", None), int):
        return text_config.num_hidden_layers
    raise ValueError(f"cannot tell the number of layers of {type(model).__name__} from its config")


def check_layers(model: nn.Module, layers: Sequence[int], module_tmp: str) -> None:
    """Every layer index is in range and its module exists (errors name the layer)."""
    total = num_hidden_layers(model)
    for layer in layers:
        if not 0 <= layer < total:
            raise ValueError(f"layer {layer} is out of range: the model has {total} layers (0..{total - 1})")
        get_module(model, module_tmp.format(layer))


def _hidden_size(model: nn.Module) -> Optional[int]:
    config = getattr(model, "config", None)
    for attr in ("hidden_size", "n_embd", "d_model"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    text_config = getattr(config, "text_config", None)
    return getattr(text_config, "hidden_size", None) if text_config is not None else None


def check_edited_modules(model: nn.Module, layers: Sequence[int], module_tmp: str, key: str = "rewrite_module_tmp") -> None:
    """Every edited module exists, holds a 2-D weight and writes into the residual stream.

    The edit's values ``W k`` are hidden states, so ``W`` must be ``[hidden_size, d_in]``:
    a template naming the MLP itself (no weight) or its ``up_proj`` (``[d_ff, hidden]``) is
    rejected here, naming the key, the module and the shapes, instead of failing deep in the solve.
    """
    check_layers(model, layers, module_tmp)
    hidden = _hidden_size(model)
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


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's input embeddings (where input ids must go)."""
    try:
        return model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return next(model.parameters()).device


def hidden_of(output) -> torch.Tensor:
    """The hidden-state tensor of a module output (decoder layers may return tuples)."""
    return output[0] if isinstance(output, (tuple, list)) else output


@contextlib.contextmanager
def _capture(
    model: nn.Module,
    module_names: Sequence[str],
    stop_after: Optional[str],
    detach: bool,
    inputs: bool,
) -> Iterator[Dict[str, torch.Tensor]]:
    captured: Dict[str, torch.Tensor] = {}
    handles: List[torch.utils.hooks.RemovableHandle] = []

    def record(name: str, value: torch.Tensor) -> None:
        captured[name] = value.detach() if detach else value
        if name == stop_after:
            raise StopForward

    try:
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


def capture_inputs(
    model: nn.Module,
    module_names: Sequence[str],
    stop_after: Optional[str] = None,
    detach: bool = True,
):
    """Record the first positional input of each named module during a forward pass.

    A context manager yielding a dict filled on each forward: ``name -> input``
    ``[batch, seq, d_in]``. If ``stop_after`` names one of the modules, the forward raises
    :class:`StopForward` right after capturing it; wrap the call in
    ``with contextlib.suppress(StopForward)``.
    """
    return _capture(model, module_names, stop_after, detach, inputs=True)


def capture_outputs(
    model: nn.Module,
    module_names: Sequence[str],
    stop_after: Optional[str] = None,
    detach: bool = True,
):
    """Record the hidden-state output ``[batch, seq, d]`` of each named module, like :func:`capture_inputs`."""
    return _capture(model, module_names, stop_after, detach, inputs=False)
