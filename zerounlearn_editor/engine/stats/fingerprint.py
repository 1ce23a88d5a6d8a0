"""What a cached statistic depends on: the model's fingerprint (config and sampled parameters, edited weights
left out) and its name as EasyEdit caches it."""
from __future__ import annotations

import hashlib
import json
from typing import Dict, Optional

import torch
from torch import nn

from zerounlearn_editor.support.model_access import num_hidden_layers

__all__ = ["model_fingerprint", "model_basename"]


# Config keys that do not change what a layer computes (names, versions, load dtype, runtime flags).
_CONFIG_IGNORED = {"_name_or_path", "name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures",
                   "use_cache", "output_attentions", "output_hidden_states", "return_dict"}


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
