"""Module-name templates of the supported Hugging Face decoder families, found from a loaded model.

:func:`detect_templates` reads ``model.config.model_type``, picks the family's templates and
checks that every named module exists in the loaded model (layer 0), so a renamed module in a
future ``transformers`` gives a clear error instead of a silent wrong edit.
"""
from __future__ import annotations

from typing import Dict

from torch import nn

from .model_access import ModuleNotFoundInModel, get_module, num_hidden_layers

__all__ = ["FAMILIES", "UnsupportedArchitecture", "detect_templates"]


class UnsupportedArchitecture(ValueError):
    """The model's family has no known module templates."""


_LLAMA_LIKE = dict(
    rewrite_module_tmp="model.layers.{}.mlp.down_proj",
    layer_module_tmp="model.layers.{}",
    mlp_module_tmp="model.layers.{}.mlp",
    attn_module_tmp="model.layers.{}.self_attn",
    ln_f_module="model.norm",
    lm_head_module="lm_head",
)
_GPT2 = dict(
    rewrite_module_tmp="transformer.h.{}.mlp.c_proj",
    layer_module_tmp="transformer.h.{}",
    mlp_module_tmp="transformer.h.{}.mlp",
    attn_module_tmp="transformer.h.{}.attn",
    ln_f_module="transformer.ln_f",
    lm_head_module="lm_head",
)
FAMILIES: Dict[str, Dict[str, str]] = {
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "gemma": _LLAMA_LIKE,
    "gemma2": _LLAMA_LIKE,
    "gpt2": _GPT2,
}
"""``config.model_type`` -> templates (``attn_module_tmp`` is used by causal tracing only)."""


def detect_templates(model: nn.Module) -> Dict[str, str]:
    """The module templates of ``model``'s family, checked against the loaded modules.

    Returns the templates plus ``"family"`` (the ``model_type``) and ``"num_layers"`` (an int).

    Raises:
        UnsupportedArchitecture: unknown ``model_type``, or a template that names no module.
    """
    model_type = str(getattr(getattr(model, "config", None), "model_type", "") or "")
    templates = FAMILIES.get(model_type)
    if templates is None:
        raise UnsupportedArchitecture(
            f"model_type {model_type!r} ({type(model).__name__}) is not supported; known families: "
            f"{', '.join(sorted(FAMILIES))}. Write the YAML by hand (module templates of a similar shipped YAML)."
        )
    for key, template in templates.items():
        name = template.format(0) if "{}" in template else template
        try:
            get_module(model, name)
        except (ModuleNotFoundInModel, AttributeError) as exc:
            raise UnsupportedArchitecture(f"{model_type}: {key} = {template!r} names no module of the loaded model ({exc})") from exc
    return dict(templates, family=model_type, num_layers=num_hidden_layers(model))  # type: ignore[arg-type]
