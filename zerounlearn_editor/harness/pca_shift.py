"""``zerounlearn pca``: how far each method moves the forget samples' representations.

At one layer (default: the YAML's last edited layer) the MLP output at the subject's last token
of every forget prompt is read before (``X0`` ``[n, d]``) and after each method (``X_m``). The
base states are centred on their mean ``mu`` and projected on their first two principal
components; every method's states are projected on the same axes. Numbers per method:

* ``mean_displacement``: ``mean_i ||x_m,i - x_0,i||`` divided by the base spread
  ``sqrt(mean_i ||x_0,i - mu||^2)`` (1.0 = moved as far as a typical sample sits from the centre);
* ``moved_variance_fraction``: ``sum_i ||x_m,i - x_0,i||^2 / sum_i ||x_0,i - mu||^2``;
* ``displacement_in_pc_plane``: the share of the displacement energy inside the base PC1-PC2 plane.

Methods are the bench's (``ZeroUnlearn``, ``ZeroUnlearn-GD``, ``GA``, ``NPO``; EasyEdit's
``MEMIT``/``AlphaEdit`` when importable, else recorded as skipped), each applied to the same
requests and restored bit-identically afterwards.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.evaluation.batching import model_device, pad_sequences, pad_token_id
from zerounlearn_editor.harness.bench_config import default_pca_methods
from zerounlearn_editor.harness.causal_trace import TraceFact, encode_fact
from zerounlearn_editor.support.model_access import get_module, hidden_of
from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = ["PcaConfig", "subject_mlp_states", "pca_numbers", "run_pca", "plot_pca"]

LOG = logging.getLogger(__name__)


@torch.no_grad()
def subject_mlp_states(
    model: nn.Module, tok: Any, facts: Sequence[TraceFact], module: str, batch_size: int = 16
) -> torch.Tensor:
    """Output of ``module`` at each fact's subject-last token, ``[n, d]`` float64 on the CPU."""
    encoded = [encode_fact(tok, f) for f in facts]
    device = model_device(model)
    target = get_module(model, module)
    rows: List[torch.Tensor] = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        batch = pad_sequences([e.ids for e in chunk], pad_token_id(tok), "right", device)
        got: Dict[str, torch.Tensor] = {}
        handle = target.register_forward_hook(lambda _m, _a, out: got.__setitem__("h", hidden_of(out)))
        try:
            model(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
                use_cache=False,
            )
        finally:
            handle.remove()
        positions = torch.tensor([e.subject[1] - 1 for e in chunk], device=device)
        rows.append(got["h"][torch.arange(len(chunk), device=device), positions].double().cpu())
    return torch.cat(rows)


def pca_numbers(base: torch.Tensor, after: Mapping[str, torch.Tensor]) -> Dict[str, Any]:
    """Base PCA axes, 2-D coordinates and displacement numbers (see the module docstring)."""
    mu = base.mean(0)
    centred = base - mu
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    axes = vh[:2]  # [2, d]
    total = float((centred ** 2).sum())
    spread = (total / base.shape[0]) ** 0.5
    out: Dict[str, Any] = {
        "explained_variance_ratio": [float(v) for v in (s[:2] ** 2 / (s ** 2).sum())],
        "base_spread": spread,
        "coords": {"base": (centred @ axes.T).tolist()},
        "methods": {},
    }
    for name, states in after.items():
        delta = states - base
        energy = float((delta ** 2).sum())
        in_plane = float(((delta @ axes.T) ** 2).sum())
        out["coords"][name] = ((states - mu) @ axes.T).tolist()
        out["methods"][name] = {
            "mean_displacement": float(delta.norm(dim=1).mean()) / spread if spread > 0 else float("nan"),
            "moved_variance_fraction": energy / total if total > 0 else float("nan"),
            "displacement_in_pc_plane": in_plane / energy if energy > 0 else 0.0,
        }
    return out


@dataclass
class PcaConfig:
    """One ``zerounlearn pca`` run."""

    hparams: str
    data: str
    out: str
    n: int = 50
    seed: int = 0
    layer: Optional[int] = None
    methods: List[str] = field(default_factory=default_pca_methods)
    method_hparams: Dict[str, str] = field(default_factory=dict)
    data_path: Optional[str] = None
    model: Optional[str] = None
    device: str = "cpu"
    progress: bool = True


def run_pca(config: PcaConfig, model: Optional[nn.Module] = None, tok: Any = None) -> Dict[str, Any]:
    """Edit with every method, read the states, write ``out`` (PNG) and its ``.json``; returns the JSON."""
    from zerounlearn_editor.data.datasets import load_cases, sample_cases
    from zerounlearn_editor.engine.pipeline import restore_weights
    from zerounlearn_editor.harness.method_rows import default_registry
    from zerounlearn_editor.harness.method_specs import HParamsLookup, MethodContext, load_main_hparams
    from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
    from zerounlearn_editor.harness.stages import compute_statistics
    from zerounlearn_editor.support.files import write_json_atomic

    registry = default_registry()
    unknown = [m for m in config.methods if m not in registry]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(registry)}")
    lookup = HParamsLookup(Path(config.hparams), load_main_hparams(config.hparams), dict(config.method_hparams))
    main = lookup.main
    layer = main.layers[-1] if config.layer is None else config.layer
    module = main.mlp_module_tmp.format(layer)
    if model is None:
        from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

        model, tok = load_model_and_tokenizer(str(config.model or main.model_name), device=config.device)
    cases = sample_cases(load_cases(config.data, path=config.data_path), config.n, config.seed)
    requests = [dict(c.request) for c in cases]
    facts = [TraceFact(r["prompt"], r["subject"], r["ground_truth"]) for r in requests]
    base = subject_mlp_states(model, tok, facts, module)
    fingerprint = ModelFingerprint.of(model)
    context = MethodContext(lookup, model, tok, Path(config.out).parent, main.neutral_target or tok.eos_token or "")
    prepared = {m: registry[m].prepare(context) for m in config.methods}
    bank = compute_statistics(model, tok, lookup, list(prepared.values()), config.progress)
    after: Dict[str, torch.Tensor] = {}
    skipped: Dict[str, str] = {}
    for name, method in prepared.items():
        fingerprint.verify(model, f"pca: before {name}")
        if method.skip_reason is not None:
            LOG.warning("%s %s", name, method.skip_reason)
            skipped[name] = method.skip_reason
            continue
        outcome = method.edit(model, tok, [dict(r) for r in requests], bank)
        try:
            after[name] = subject_mlp_states(model, tok, facts, module)
        finally:
            restore_weights(model, outcome.weights_copy)
    fingerprint.verify(model, "pca: after the last method")
    result = pca_numbers(base, after)
    result.update(model=str(config.model or main.model_name), module=module, layer=layer, data=config.data,
                  n=len(cases), seed=config.seed, case_ids=[c.case_id for c in cases], skipped=skipped)
    out = Path(config.out)
    write_json_atomic(out.with_suffix(".json"), result)
    plot_pca(result, out)
    return result


def plot_pca(result: Mapping[str, Any], path: Path) -> Optional[Path]:
    """One panel per method: base states (grey), states after the method, and the moves between them."""
    plt = pyplot('the PCA figure')
    if plt is None:
        return None
    names = list(result["methods"])
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(3.4 * max(len(names), 1), 3.4), squeeze=False)
    base = result["coords"]["base"]
    for ax, name in zip(axes[0], names):
        moved = result["coords"][name]
        for (x0, y0), (x1, y1) in zip(base, moved):
            ax.plot([x0, x1], [y0, y1], color="0.8", linewidth=0.6, zorder=1)
        ax.scatter([p[0] for p in base], [p[1] for p in base], s=10, color="0.5", label="base", zorder=2)
        ax.scatter([p[0] for p in moved], [p[1] for p in moved], s=10, label=name, zorder=3)
        m = result["methods"][name]
        ax.set_title(
            f"{name}\nmove {m['mean_displacement']:.2f} spread, var {m['moved_variance_fraction']:.2f}", fontsize=9
        )
        ax.set_xlabel("PC1")
        ax.set_ylabel("PC2")
    fig.suptitle(f"{Path(str(result['model'])).name}: {result['module']} at the subject's last token "
                 f"({result['n']} forget samples)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)
