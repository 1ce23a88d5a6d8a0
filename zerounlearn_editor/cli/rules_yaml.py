"""A ZeroUnlearn-GD YAML written by ``init-hparams``' rules in-process, cached by what it depends on.

For a model with no shipped YAML (``zerounlearn demo --model gemma3-270m``): the layers by ``--layers auto``'s MLP
causal trace of the given facts (restoration window
:func:`~zerounlearn_editor.harness.causal_trace.depth_scaled_window`, the nearest shipped YAML's width), the
settings by :mod:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules` (measured on the weights): what
``zerounlearn init-hparams --model M --method ZeroUnlearn-GD --layers auto --facts F`` writes, but without the text
weight by key reach (the paper's null-space penalty): on the demo's five everyday facts Gemma-3-270m's YAML with it
left 2 of 5 answered (George Washington, Alexander Graham Bell), without it none (benchmarks/RESULTS.md 12.5,
12.17); and without the plain YAML's target settings behind a post-MLP norm (the median-coordinate step, 75 steps,
a repair round; measured at n = 10 and 50, RESULTS 12.35, not on the demo's facts). The file lives under
``<cache>/hparams/rules/`` and its name holds a digest of everything it depends on (:func:`rules_yaml_key`): the
model's fingerprint and dtype, the rules' version, reference quantities and key reach, the method, and the trace's
facts, window and width (which fix the layers). A second call with the same inputs reads the file; anything changed
writes a new one (atomically).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from torch import nn

from zerounlearn_editor.cli.init_hparams import (
    build_hparams,
    default_width,
    scale_rules_for,
    trace_layers,
    write_hparams,
)

LOG = logging.getLogger(__name__)
METHOD = "ZeroUnlearn-GD"
Fact = Tuple[str, str, str]  # (prompt, subject, answer)


def rules_yaml_key(model: nn.Module, facts: Sequence[Fact], window: int, width: int, method: str = METHOD) -> str:
    """A hex digest (16 characters) of what the YAML by rule depends on (see the module docstring)."""
    from zerounlearn_editor.engine.stats.fingerprint import model_fingerprint
    from zerounlearn_editor.methods.zerounlearn_gd.scale_rules import FIRST_TRY_KEY_REACH, REFERENCE, RULES_VERSION

    dtype = str(next(model.parameters()).dtype)
    material: Dict[str, Any] = {
        "model": model_fingerprint(model), "dtype": dtype, "rules": RULES_VERSION, "reference": asdict(REFERENCE),
        "key_reach": FIRST_TRY_KEY_REACH,
        "method": method,
        "trace": {"facts": [list(f) for f in facts], "window": window, "width": width},
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def rules_yaml(model: nn.Module, tok: Any, model_name: str, facts: Sequence[Fact],
               cache_dir: Optional[Path] = None, progress: bool = False) -> Path:
    """The cached YAML by rule of ``model`` (loaded as ``model_name``) for forgetting ``facts`` (written on first
    use; the trace uses those of them the model answers, at least 3)."""
    from zerounlearn_editor.harness.causal_trace import TraceFact, answered_facts, depth_scaled_window
    from zerounlearn_editor.support.model_access import num_hidden_layers
    from zerounlearn_editor.support.model_zoo import default_cache_dir

    n_layers = num_hidden_layers(model)
    window, width = depth_scaled_window(n_layers), default_width(model, METHOD)
    key = rules_yaml_key(model, facts, window, width)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "hparams" / "rules"
    path = folder / f"{Path(str(model_name)).name}-{METHOD}-{key}.yaml"
    if path.is_file():
        LOG.info("YAML by init-hparams' rules for %s: %s (cached)", model_name, path)
        return path
    trace = [TraceFact(p, s, a) for p, s, a in facts]
    answered = answered_facts(model, tok, trace, len(trace))
    if len(answered) < 3:
        raise ValueError(f"{model_name}: only {len(answered)} of the {len(trace)} facts are answered; the layer "
                         "trace needs 3 (give --hparams)")
    LOG.info("writing the YAML by init-hparams' rules for %s: MLP trace of %d facts (window %d), then the settings "
             "measured on its weights", model_name, len(answered), window)
    layers = trace_layers(model, tok, answered, window, width, progress=progress)
    rules, rules_note = scale_rules_for(model, tok, layers, plain=False)  # the paper's penalty (module docstring)
    config, base = build_hparams(model, str(model_name), METHOD, layers, None, None, rules)
    note = (f"layers from a causal trace of {len(answered)} facts (restoration window {window}, 10 x layers / 48); "
            f"cached by zerounlearn demo, key {key}")
    return write_hparams(config, base, path, note, None, rules_note)
