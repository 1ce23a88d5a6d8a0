"""``zerounlearn trace``: ROME-style causal tracing of known facts (which layers carry them; suggests ``layers``)."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from types import ModuleType
from typing import Any, List, Optional

from zerounlearn_editor.cli.common import load_hparams

LOG = logging.getLogger("zerounlearn_editor.cli")


def trace_facts_for(model: Any, tok: Any, data: str, data_path: Optional[str], n: int, seed: int,
                    include_unknown: bool) -> List[Any]:
    """``n`` facts of ``data`` (shuffled with ``seed``) the model knows (or any, with ``include_unknown``)."""
    import random

    from zerounlearn_editor.data.datasets import load_cases
    from zerounlearn_editor.harness.causal_trace import TraceFact, known_facts

    cases = list(load_cases(data, path=data_path))
    random.Random(seed).shuffle(cases)
    if include_unknown:
        facts = [TraceFact(c.request["prompt"], c.request["subject"], c.request["ground_truth"]) for c in cases[:n]]
    else:
        facts = known_facts(model, tok, cases, n)
    if not facts:
        raise ValueError(
            f"the model knows none of the {len(cases)} facts of {data} (first answer token not its argmax); "
            "pass --include-unknown to trace them anyway, or give --layers explicitly"
        )
    if len(facts) < n:
        LOG.warning("only %d known facts of %s (asked for %d)", len(facts), data, n)
    return facts


def _cmd_trace(args: argparse.Namespace) -> int:
    import json

    from zerounlearn_editor.harness.causal_trace import TraceSettings, depth_scaled_window, plot_trace, trace_facts
    from zerounlearn_editor.support.files import write_json_atomic
    from zerounlearn_editor.support.model_access import num_hidden_layers
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    hparams = load_hparams(args.hparams) if args.hparams else None
    name = args.model or (hparams.model_name if hparams else None)
    if name is None:
        raise SystemExit("zerounlearn trace: --model or --hparams required")
    width = args.width or (len(hparams.layers) if hparams else 3)
    model, tok = load_model_and_tokenizer(str(name), device=args.device)
    facts = trace_facts_for(model, tok, args.data, args.data_path, args.n, args.seed, args.include_unknown)
    if args.window is not None and args.window < 1:
        raise ValueError(f"--window must be at least 1, got {args.window}")
    window = args.window or depth_scaled_window(num_hidden_layers(model))
    settings = TraceSettings(noise=args.noise, samples=args.samples, window=window, seed=args.seed, width=width)
    result = trace_facts(model, tok, facts, settings, progress=not args.no_progress)
    result.update(model=str(name), data=args.data)
    out = Path(args.out)
    write_json_atomic(out / "trace.json", result)
    plot_trace(result, out / "trace.png")
    best = max(range(result["num_layers"]), key=lambda l: result["indirect_effect"]["mlp"][l])
    print(f"{len(facts)} facts, p(clean) {result['p_clean']:.3f}, p(corrupted) {result['p_corrupt']:.3f}; "
          f"MLP effect peaks at layer {best} (+{result['indirect_effect']['mlp'][best]:.3f}) -> {out / 'trace.json'}")
    print(f"layers: {json.dumps(result['suggested_layers'])}")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``trace`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "trace",
        help="ROME-style causal tracing of known facts: which layers carry them (suggests `layers`)",
        description="Corrupt the subject embeddings with seeded Gaussian noise, restore one layer's clean state at the "
        "subject's last token (residual; MLP / attention over a window of layers) and measure the recovered "
        "probability of the true answer. Writes OUT/trace.json and OUT/trace.png; the last line is the suggested "
        "layers.",
        parents=[
            parents.hparams("YAML giving the model (and the window width = its number of layers)"),
            parents.model(),
            parents.data("dataset name or file of facts (default counterfact)", default="counterfact"),
            parents.n("known facts to trace (default 10)", default=10),
            parents.include_unknown("trace facts the model does not predict too"),
            parents.width("suggested window width (default: the YAML's layer count, else 3)"),
            parents.seed(),
            parents.out("output folder", required=True),
            parents.device(),
            parents.progress(),
        ],
    )
    p.add_argument("--samples", type=int, default=10, help="noise draws per fact (default 10)")
    p.add_argument(
        "--noise", type=float, default=3.0, help="noise std in units of the subject embeddings' std (default 3)"
    )
    p.add_argument("--window", type=int, default=None,
                   help="layers restored together for MLP/attention (default round(10 x layers / 48), at least 1: "
                        "ROME's 10 of GPT-2 XL's 48 scaled to the depth)")
    p.set_defaults(func=_cmd_trace)
