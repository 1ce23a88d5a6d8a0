"""What a cached statistic depends on: the model's fingerprint (config and sampled parameters, edited weights
left out) and its name as EasyEdit caches it.

The fingerprint is exact: float32 and bfloat16 loads of a checkpoint agree (the sampled values are rounded to
bfloat16), but a float16 load of a float32 checkpoint does not (rounding to float16 then to bfloat16 differs from
rounding to bfloat16 in 2.9% of SmolLM2's values; no exact digest can agree on every load). So a statistic also
records :func:`weights_sample` (values as loaded), and :func:`same_weights_at_another_precision` tells a load of the
same weights in another dtype (every sampled value within half-precision rounding) from another model.
"""
from __future__ import annotations

import hashlib
import json
from typing import Dict, Mapping, Optional

import numpy as np
import torch
from torch import nn

from zerounlearn_editor.support.model_access import num_hidden_layers

__all__ = ["model_basename", "model_fingerprint", "same_weights_at_another_precision", "weights_sample"]


# Config keys that do not change what a layer computes (names, versions, load dtype, runtime flags).
_CONFIG_IGNORED = {"_name_or_path", "name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures",
                   "use_cache", "output_attentions", "output_hidden_states", "return_dict"}


_SAMPLE_PER_TENSOR = 16
# two loads of one checkpoint differ by at most a bfloat16 rounding (2^-9 relative) plus a float16 one (2^-11), or a
# float16 subnormal's spacing (2^-24) for values below 2^-14
_SAMPLE_RTOL = 2.0 ** -7
_SAMPLE_ATOL = 2.0 ** -23


def _config_digest(model: nn.Module) -> str:
    config = getattr(model, "config", None)
    config_dict = config.to_dict() if hasattr(config, "to_dict") else {}
    config_dict = {k: v for k, v in config_dict.items() if k not in _CONFIG_IGNORED and not k.startswith("_")}
    return hashlib.blake2b(json.dumps(config_dict, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


def _skipped(model: nn.Module, skip_template: Optional[str]) -> set:
    return {f"{skip_template.format(i)}.weight" for i in range(num_hidden_layers(model))} if skip_template else set()


def weights_sample(model: nn.Module, skip_template: Optional[str] = None) -> str:
    """``"<config digest>:<hex>"``: the config's digest and, of every parameter but the edited modules' weights
    (``skip_template``), 16 evenly spaced values as loaded (float32 bytes, hex): about 35 KB of text for SmolLM2."""
    skipped = _skipped(model, skip_template)
    values = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in skipped:
                continue
            flat = param.detach().reshape(-1)
            count = min(_SAMPLE_PER_TENSOR, flat.numel())
            index = torch.arange(count, dtype=torch.int64, device=flat.device) * (flat.numel() - 1) // max(count - 1, 1)
            values.append(flat[index].float().cpu().numpy())
    sample = np.concatenate(values) if values else np.zeros(0, dtype=np.float32)
    return f"{_config_digest(model)}:{sample.astype('<f4').tobytes().hex()}"


def same_weights_at_another_precision(meta: Mapping[str, str], model: nn.Module, skip_template: Optional[str],
                                      dtype: str) -> bool:
    """Whether a statistic's metadata (``model_sample``, ``model_dtype``) records the weights of ``model`` (loaded
    in ``dtype``, e.g. ``"float16"``) loaded in another dtype: same config, every sampled value within
    half-precision rounding. False for the same dtype (then the exact fingerprint decides) or no sample."""
    recorded = meta.get("model_sample")
    if not recorded or meta.get("model_dtype") in (None, dtype):
        return False
    config, _, data = recorded.partition(":")
    now_config, _, now_data = weights_sample(model, skip_template).partition(":")
    if config != now_config or len(data) != len(now_data):
        return False
    try:
        a = np.frombuffer(bytes.fromhex(data), dtype="<f4").astype(np.float64)
    except ValueError:
        return False
    b = np.frombuffer(bytes.fromhex(now_data), dtype="<f4").astype(np.float64)
    return bool(np.isfinite(a).all() and np.isfinite(b).all()
                and (np.abs(a - b) <= _SAMPLE_RTOL * np.abs(a) + _SAMPLE_ATOL).all())


def model_fingerprint(model: nn.Module, skip_template: Optional[str] = None,
                      replace: Optional[Dict[str, torch.Tensor]] = None) -> str:
    """A short digest of what the model's statistics depend on (not its name).

    Hashes the config (without path, versions or load dtype) and, of every parameter, its name, shape and
    64 evenly spaced values rounded to bfloat16 (float32 and bfloat16 loads agree). The edited
    modules' weights (``skip_template``) are left out, so the edits of a sequence keep the statistic valid.
    ``replace`` (parameter name -> tensor) hashes those tensors instead, e.g. the weights before an edit.
    """
    config = getattr(model, "config", None)
    config_dict = config.to_dict() if hasattr(config, "to_dict") else {}
    config_dict = {k: v for k, v in config_dict.items() if k not in _CONFIG_IGNORED and not k.startswith("_")}
    digest = hashlib.blake2b(digest_size=12)
    digest.update(json.dumps(config_dict, sort_keys=True, default=str).encode())
    skipped = ({f"{skip_template.format(i)}.weight" for i in range(num_hidden_layers(model))}
               if skip_template else set())
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in skipped:
                continue
            if replace and name in replace:
                param = replace[name]
            flat = param.detach().reshape(-1)
            count = min(64, flat.numel())
            # integer spacing (a float32 linspace rounds past the end of a 28M-element tensor)
            index = torch.arange(count, dtype=torch.int64, device=flat.device) * (flat.numel() - 1) // max(count - 1, 1)
            sample = flat[index].to(torch.bfloat16).float().cpu().numpy()
            digest.update(f"{name}|{tuple(param.shape)}|".encode())
            digest.update(sample.tobytes())
    return digest.hexdigest()


def model_basename(model: nn.Module) -> str:
    """The model's name as EasyEdit caches it: the last path part of ``_name_or_path``."""
    name = str(getattr(model.config, "_name_or_path", "") or "").rstrip("/").rsplit("/", 1)[-1]
    return name or type(model).__name__
