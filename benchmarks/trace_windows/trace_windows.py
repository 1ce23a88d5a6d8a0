"""The MLP causal trace of one model at several restoration windows, and the layers each window suggests.

`zerounlearn init-hparams --layers auto` picks the best window of `width` layers before the last layer from the
MLP indirect effect; the effect depends on the restoration window (how many MLP outputs around each layer are
restored together). This script traces the same facts at each window given (MLP restorations only, seeded as
`zerounlearn trace`) and writes one JSON: per window the effect per layer and the suggested layers
(benchmarks/RESULTS.md section 12).

Run from the repository root, e.g.:
  OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/trace_windows/trace_windows.py --model smollm2 \
      --facts-from benchmarks/results/evaluation/trace_smollm2.json --windows 6,1,10 \
      --out benchmarks/results/trace_windows/smollm2.json
`--facts-from` takes a trace.json (its cases) or a `zerounlearn unlearn` facts file (the facts the model answers,
at most --n of them).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from zerounlearn_editor.harness.causal_trace import (
    TraceFact,
    TraceSettings,
    answered_facts,
    suggest_window,
    trace_facts,
)
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer


def read_facts(path: Path, model, tok, n: int):
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and "cases" in data:
        return [TraceFact(c["prompt"], c["subject"], c["answer"]) for c in data["cases"]][:n]
    from zerounlearn_editor.cli.init_hparams import facts_to_trace

    return answered_facts(model, tok, facts_to_trace(path), n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--facts-from", required=True, type=Path)
    parser.add_argument("--windows", required=True, help="comma-separated restoration windows, e.g. 6,1,10")
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--width", type=int, default=3)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    model, tok = load_model_and_tokenizer(args.model)
    facts = read_facts(args.facts_from, model, tok, args.n)
    out = {"model": args.model, "facts_from": str(args.facts_from), "facts": [f.__dict__ for f in facts],
           "windows": {}}
    for window in (int(w) for w in args.windows.split(",")):
        start = time.time()
        result = trace_facts(model, tok, facts, TraceSettings(window=window, width=args.width), progress=False,
                             kinds=("mlp",))
        effect = result["indirect_effect"]["mlp"]
        out["num_layers"] = result["num_layers"]
        out["windows"][str(window)] = {
            "mlp_effect": effect, "p_clean": result["p_clean"], "p_corrupt": result["p_corrupt"],
            "embedding_std": result["embedding_std"], "settings": result["settings"],
            "suggested_before_last": suggest_window(effect[:-1], min(args.width, result["num_layers"] - 1)),
            "seconds": round(time.time() - start, 1),
        }
        write_json_atomic(args.out, out)
        print(f"window {window}: {out['windows'][str(window)]['suggested_before_last']} "
              f"({out['windows'][str(window)]['seconds']} s)", flush=True)


if __name__ == "__main__":
    main()
