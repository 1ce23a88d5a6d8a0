"""ROME-style causal tracing (``zerounlearn trace``): which layers carry a fact at the subject.

For each fact the model knows (``prompt`` with the subject filled in, true ``answer``):

1. clean run: ``p_clean`` = probability of the answer's first token after the prompt, and every
   layer's residual output, MLP output and attention output at the subject's last token;
2. corrupted runs: Gaussian noise ``N(0, (noise * sigma)^2)`` is added to the input embeddings of
   the subject tokens (``sigma`` = std of the subject tokens' embedding entries over the traced
   facts, as the embedding module outputs them; ``noise`` = 3 as in ROME), ``samples`` draws from
   one seeded generator; ``p_corrupt`` is their mean answer probability;
3. restored runs: the corrupted runs again, but one layer's clean state is written back at the
   subject's last token: the residual stream (the layer's output), or the MLP / attention
   outputs of a window of ``window`` layers centred on it (``[l - window//2, l + window - window//2)``
   clipped to the model, as in ROME; ``zerounlearn trace`` and ``init-hparams`` default to
   :func:`depth_scaled_window`). ``p_restored[kind][l]`` is their mean answer probability.

All restorations of one kind run as one batch (``(layers + 1) x samples`` rows, chunked), the
same noise draws for every row group, so the curves are comparable layer to layer and exactly
reproducible with the seed. ``suggested_layers`` is the contiguous window of ``width`` layers
with the largest mean MLP indirect effect ``p_restored["mlp"][l] - p_corrupt`` (ties: earlier).
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn
from tqdm.auto import tqdm

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.architectures import detect_templates
from zerounlearn_editor.evaluation.batching import encode_probe, model_device
from zerounlearn_editor.support.model_access import get_module, hidden_of, num_hidden_layers, unflatten_tokens
from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = [
    "TraceSettings",
    "TraceFact",
    "EncodedFact",
    "encode_fact",
    "trace_facts",
    "answered_facts",
    "known_facts",
    "suggest_window",
    "depth_scaled_window",
    "plot_trace",
    "KINDS",
]

LOG = logging.getLogger(__name__)
KINDS = ("residual", "mlp", "attention")
WEAK_CORRUPTION = 0.5
"""A trace whose corrupted runs keep more than this share of the clean answer probability is warned about: the
corruption did not remove the facts, so there is little for a restored layer to bring back."""


ROME_WINDOW = 10
"""ROME's restoration window, set for GPT-2 XL's 48 layers (:data:`ROME_DEPTH`)."""
ROME_DEPTH = 48


def depth_scaled_window(num_layers: int) -> int:
    """The restoration window for a model of ``num_layers`` layers: ROME's 10 of GPT-2 XL's 48 layers scaled to the
    depth, ``max(1, round(10 * num_layers / 48))`` (halves round up): 4 on Gemma-3-270m (18 layers), 6 on SmolLM2
    (30), 6 on Llama-3.2-3B (28), 10 on GPT-2 XL (48). A fixed window of 10 on an 18-layer model restores more than
    half the model around every layer, so the MLP curve is a plateau and the suggested layers an arbitrary pick
    among near-equal values (benchmarks/RESULTS.md section 12)."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    return max(1, math.floor(ROME_WINDOW * num_layers / ROME_DEPTH + 0.5))


@dataclass(frozen=True)
class TraceSettings:
    """Knobs of a trace (see the module docstring)."""

    noise: float = 3.0
    samples: int = 10
    window: int = 10
    seed: int = 0
    width: int = 3
    max_rows: int = 256


@dataclass(frozen=True)
class TraceFact:
    """One traced fact: ``prompt`` contains ``subject`` verbatim; ``answer`` has no leading space."""

    prompt: str
    subject: str
    answer: str


@dataclass
class EncodedFact:
    """A fact's prompt ids, its subject's token range and the answer's first token id."""

    ids: List[int]
    subject: Tuple[int, int]  # token range [start, stop) of the subject
    answer_id: int


def encode_fact(tok: Any, fact: TraceFact) -> EncodedFact:
    """Tokenise ``fact``: its prompt ids, the subject's token span and the answer's first token (ValueError naming
    the prompt when the subject is not in it)."""
    at = fact.prompt.find(fact.subject)
    if at < 0:
        raise ValueError(f"subject {fact.subject!r} does not occur in prompt {fact.prompt!r}")
    end = at + len(fact.subject)
    if getattr(tok, "is_fast", False):
        enc = tok(fact.prompt, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        inside = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a < end and b > at]
        if not inside:
            raise ValueError(f"no token of {fact.prompt!r} covers subject {fact.subject!r}")
        start, stop = inside[0], inside[-1] + 1
    else:  # token counts of the text before / through the subject (the package's subject_last rule)
        ids = list(tok(fact.prompt)["input_ids"])
        stop = len(tok(fact.prompt[:end])["input_ids"])
        start = min(len(tok(fact.prompt[:at])["input_ids"]) if at else len(tok("")["input_ids"]), stop - 1)
    encoded = encode_probe(tok, Probe(fact.prompt, fact.answer))
    return EncodedFact(ids, (start, stop), encoded.input_ids[encoded.answer_start])


def _module_names(model: nn.Module, templates: Mapping[str, str], kind: str, layer: int) -> str:
    key = {"residual": "layer_module_tmp", "mlp": "mlp_module_tmp", "attention": "attn_module_tmp"}[kind]
    return templates[key].format(layer)


def _windows(kind: str, n_layers: int, window: int) -> List[List[int]]:
    """Per restored layer ``l``: the layers whose ``kind`` state is restored."""
    if kind == "residual":
        return [[l] for l in range(n_layers)]
    lo = window // 2
    return [list(range(max(0, l - lo), min(n_layers, l - lo + window))) for l in range(n_layers)]


def _with_hidden(output: Any, hidden: torch.Tensor) -> Any:
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    if isinstance(output, list):
        return [hidden, *output[1:]]
    return hidden


@torch.no_grad()
def _trace_one(model: nn.Module, templates: Mapping[str, str], enc: EncodedFact, sigma: float, settings: TraceSettings,
               generator: torch.Generator, kinds: Sequence[str]) -> Dict[str, Any]:
    device = model_device(model)
    n_layers = num_hidden_layers(model)
    ids = torch.tensor([enc.ids], device=device)
    t = enc.subject[1] - 1
    s0, s1 = enc.subject
    names = {(kind, l): _module_names(model, templates, kind, l) for kind in kinds for l in range(n_layers)}
    clean: Dict[Tuple[str, int], torch.Tensor] = {}
    handles = []
    try:
        for key, name in names.items():
            handles.append(
                get_module(model, name).register_forward_hook(
                    lambda _m, _a, out, key=key: clean.__setitem__(
                        key, unflatten_tokens(hidden_of(out), tuple(ids.shape))[0, t].clone()
                    )
                )
            )
        logits = model(input_ids=ids).logits[0, -1].float()
    finally:
        for h in handles:
            h.remove()
    p_clean = float(torch.softmax(logits, -1)[enc.answer_id])
    embed = model.get_input_embeddings()
    d = embed.weight.shape[1]
    noise = torch.randn((settings.samples, s1 - s0, d), generator=generator, dtype=torch.float32).to(device) * (
        settings.noise * sigma
    )
    out: Dict[str, Any] = {"p_clean": p_clean}
    S = settings.samples
    for kind in kinds:
        groups: List[Optional[List[int]]] = [None] + _windows(kind, n_layers, settings.window)  # None = no restoration
        probs: List[float] = []
        per_chunk = max(1, settings.max_rows // S)
        for c0 in range(0, len(groups), per_chunk):
            chunk = groups[c0:c0 + per_chunk]
            rows = len(chunk) * S
            batch = ids.expand(rows, -1)

            def add_noise(_m, _a, output, rows=rows):
                output = output.clone()
                output[:, s0:s1] += noise.repeat(rows // S, 1, 1).to(output.dtype)
                return output

            handles = [embed.register_forward_hook(add_noise)]
            for l in range(n_layers):
                row_idx = [g * S + j for g, layers in enumerate(chunk) if layers and l in layers for j in range(S)]
                if not row_idx:
                    continue
                index = torch.tensor(row_idx, device=device)

                def restore(_m, _a, output, key=(kind, l), index=index, shape=tuple(batch.shape)):
                    flat = hidden_of(output)
                    hidden = unflatten_tokens(flat, shape).clone()  # OPT's MLP sees [rows * seq, d]
                    hidden[index, t] = clean[key].to(hidden.dtype)
                    return _with_hidden(output, hidden.view(flat.shape))

                handles.append(get_module(model, names[(kind, l)]).register_forward_hook(restore))
            try:
                logits = model(input_ids=batch).logits[:, -1].float()
            finally:
                for h in handles:
                    h.remove()
            p = torch.softmax(logits, -1)[:, enc.answer_id].view(len(chunk), S).mean(1)
            probs.extend(float(v) for v in p)
        out["p_corrupt"] = probs[0]
        out[kind] = probs[1:]
    return out


@torch.no_grad()
def subject_embedding_std(model: nn.Module, tok: Any, facts: Sequence[TraceFact]) -> float:
    """Std of the input-embedding module's output entries on every subject token of ``facts`` (ROME's noise scale).

    The noise is added to that output, so it is measured there: an embedding that scales its rows (Gemma's, by
    ``sqrt(d_model)``) is measured as the model reads it, not as its weight stores it.
    """
    embed = model.get_input_embeddings()
    rows = []
    for fact in facts:
        enc = encode_fact(tok, fact)
        rows.extend(enc.ids[enc.subject[0]:enc.subject[1]])
    return float(embed(torch.tensor([rows], device=embed.weight.device)).float().std())


def suggest_window(effect: Sequence[float], width: int) -> List[int]:
    """The ``width`` contiguous layers with the largest mean ``effect`` (the earliest on ties)."""
    if not 1 <= width <= len(effect):
        raise ValueError(f"window width {width} must be between 1 and the number of layers {len(effect)}")
    best = max(range(len(effect) - width + 1), key=lambda s: (sum(effect[s:s + width]), -s))
    return list(range(best, best + width))


def trace_facts(model: nn.Module, tok: Any, facts: Sequence[TraceFact], settings: TraceSettings = TraceSettings(),
                templates: Optional[Mapping[str, str]] = None, progress: bool = True,
                kinds: Sequence[str] = KINDS) -> Dict[str, Any]:
    """Trace every fact; returns the JSON of ``trace.json`` (per-layer means, per-case data, settings).

    ``kinds``: the restorations to run (a subset of :data:`KINDS` containing ``"mlp"``, whose curve suggests the
    layers); ``init-hparams`` runs only ``("mlp",)``, a third of the forward passes.
    """
    if not facts:
        raise ValueError("no facts to trace")
    kinds = tuple(k for k in KINDS if k in kinds)
    if "mlp" not in kinds:
        raise ValueError(f"trace kinds {kinds} must include 'mlp' (the curve that suggests the layers)")
    if settings.samples < 1 or settings.window < 1 or settings.noise <= 0:
        raise ValueError(f"bad trace settings {settings}: samples and window must be >= 1, noise > 0")
    model.eval()
    templates = dict(templates or detect_templates(model))
    n_layers = num_hidden_layers(model)
    sigma = subject_embedding_std(model, tok, facts)
    generator = torch.Generator().manual_seed(settings.seed)
    cases = []
    for fact in tqdm(facts, desc="trace", unit="fact", disable=not progress):
        enc = encode_fact(tok, fact)
        result = _trace_one(model, templates, enc, sigma, settings, generator, kinds)
        cases.append(dict(asdict(fact), subject_tokens=list(enc.subject), answer_token=enc.answer_id, **result))
    mean = lambda key: sum(c[key] for c in cases) / len(cases)  # noqa: E731
    curves = {kind: [sum(c[kind][l] for c in cases) / len(cases) for l in range(n_layers)] for kind in kinds}
    p_corrupt = mean("p_corrupt")
    effect = {kind: [v - p_corrupt for v in curves[kind]] for kind in kinds}
    suggested = suggest_window(effect["mlp"], min(settings.width, n_layers))
    p_clean = mean("p_clean")
    if p_corrupt > WEAK_CORRUPTION * p_clean:
        LOG.warning("causal trace: the corrupted subjects keep p(answer) %.3f of the clean %.3f (over %.0f%%): the "
                    "noise hardly removes the facts, so the per-layer effects (largest %+.4f) are noise and the "
                    "suggested layers %s are not evidence; raise the noise or trace other facts", p_corrupt, p_clean,
                    100 * WEAK_CORRUPTION, max(effect["mlp"]), suggested)
    return {
        "model": str(getattr(model.config, "_name_or_path", type(model).__name__)),
        "num_layers": n_layers,
        **curves,
        "indirect_effect": effect,
        "p_clean": p_clean,
        "p_corrupt": p_corrupt,
        "noise_std": settings.noise * sigma,
        "embedding_std": sigma,
        "suggested_layers": suggested,
        "settings": asdict(settings),
        "templates": {k: v for k, v in templates.items() if isinstance(v, str)},
        "cases": cases,
    }


def plot_trace(result: Mapping[str, Any], path: Path) -> Optional[Path]:
    """Three curves (mean restored probability per layer) and a per-case MLP heatmap; None without matplotlib."""
    plt = pyplot('trace.png')
    if plt is None:
        return None
    layers = list(range(result["num_layers"]))
    fig, (ax, hx) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.2, 1]})
    for kind, colour in zip(KINDS, ("tab:purple", "tab:green", "tab:red")):
        if kind in result:
            ax.plot(layers, result[kind], label=kind, color=colour)
    ax.axhline(result["p_clean"], color="k", linestyle=":", linewidth=0.8, label="clean")
    ax.axhline(result["p_corrupt"], color="grey", linestyle="--", linewidth=0.8, label="corrupted")
    lo, hi = result["suggested_layers"][0], result["suggested_layers"][-1]
    ax.axvspan(lo - 0.5, hi + 0.5, color="orange", alpha=0.15, label=f"suggested {lo}-{hi}")
    ax.set_xlabel("layer restored at the subject's last token")
    ax.set_ylabel("p(true answer)")
    ax.set_title(f"causal trace, {len(result['cases'])} facts (window {result['settings']['window']})")
    ax.legend(fontsize=7)
    grid = [[c[kind][l] - c["p_corrupt"] for l in layers] for c in result["cases"] for kind in ("mlp",)]
    image = hx.imshow(grid, aspect="auto", cmap="Greens", interpolation="nearest")
    hx.set_xlabel("layer")
    hx.set_ylabel("fact")
    hx.set_title("MLP indirect effect per fact")
    fig.colorbar(image, ax=hx)
    fig.tight_layout()
    return save_figure(fig, path)


def answered_facts(model: nn.Module, tok: Any, facts: Sequence[TraceFact], n: Optional[int] = None) -> List[TraceFact]:
    """The first ``n`` (default all) of ``facts``, in order, whose answer's first token is the model's argmax
    after the prompt: the facts the model answers."""
    from zerounlearn_editor.evaluation.metrics import evaluate_probes

    out: List[TraceFact] = []
    for start in range(0, len(facts), 64):
        chunk = list(facts[start:start + 64])
        scores = evaluate_probes(model, tok, [Probe(f.prompt, f.answer) for f in chunk])
        for fact, first in zip(chunk, scores["first_acc"]):
            if first == 1.0:
                out.append(fact)
                if n is not None and len(out) == n:
                    return out
    return out


def known_facts(model: nn.Module, tok: Any, cases: Sequence[Any], n: int) -> List[TraceFact]:
    """The first ``n`` cases (in the given order) whose answer's first token is the model's argmax."""
    facts = [TraceFact(c.request["prompt"], c.request["subject"], c.request["ground_truth"]) for c in cases]
    return answered_facts(model, tok, facts, n)
