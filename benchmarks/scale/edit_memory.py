"""Peak memory of one ZeroUnlearn(-GD) edit per stage, at several batch sizes, one fresh process per size.

Each size runs in its own Python process (so no allocator state is carried from a larger edit to a smaller
one): it loads the model and the cached ``C0``, draws the bench-scale batch sample (seed, data), takes the
neutral targets from a bench-scale target cache (computing the missing chunks), hands the allocator's free
pages back, and times one edit with the sampled RSS split by the edit's stages (``EditReport.stage_spans``).
The model, the statistics and the targets are held before the edit starts, so the figures are what the edit
itself adds. ``--mmap-threshold`` fixes glibc's mmap threshold in the child processes, so that RSS follows
live memory instead of the heap glibc keeps after large blocks are freed. Writes ``<out>/n<n>.json`` per
size, ``<out>/edit_memory.json`` and ``edit_memory.md``.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/scale/edit_memory.py \
        --hparams hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-many.yaml \
        --data ../shared/data/counterfact/counterfact_easyedit_val_1919.json --n 10,100,1000 --seed 1 \
        --targets benchmarks/results/scale/report_val_suppress_a0/targets --out benchmarks/results/scale/edit_memory
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

STAGES = ("validate", "contexts", "fluency", "keys", "solve", "write_back", "answered")


def one_size(args: argparse.Namespace, n: int) -> Dict[str, Any]:
    """Run one edit of ``n`` facts in this process; returns its row."""
    from zerounlearn_editor.harness.scale_cases import draw_cases
    from zerounlearn_editor.harness.scale_config import ScaleConfig
    from zerounlearn_editor.harness.scale_rows import BATCH_ROWS
    from zerounlearn_editor.harness.scale_setup import edit_once, load_setup, prepare_run
    from zerounlearn_editor.harness.scale_targets import TargetCache
    from zerounlearn_editor.methods.registry import load_method

    hp = load_method(args.hparams)[0]
    config = ScaleConfig(hparams=[args.hparams], data=args.data, seeds=[args.seed], out=args.out, ns=[args.draw],
                         ppl_tokens=0)
    run = prepare_run(config, BATCH_ROWS)  # the YAML and the case pool, as bench-scale batch loads them
    setup = load_setup(config, [hp])
    cases, _ = draw_cases(config, run, args.draw, args.seed, lambda: setup)
    requests = [dict(c.request) for c in cases[:n]]
    targets, _, _ = TargetCache(Path(args.targets), setup.fingerprint).get(setup.model, setup.tok, hp, requests,
                                                                          args.target_chunk)
    _, details, cost = edit_once(setup, hp, requests, targets)
    return {"n": n, "hparams": args.hparams, "data": args.data, "seed": args.seed, "edit_cost": cost.as_dict(),
            "timings": details["timings"]}


def table(rows: List[Dict[str, Any]]) -> str:
    """Markdown table: per size the whole edit's RSS peak above its start and, per stage, the peak above that
    start / the largest rise within the stage (MB)."""
    head = "| n | edit RSS peak MB | " + " | ".join(f"{s} MB" for s in STAGES) + " | edit CPU s |"
    lines = [head, "|" + "---|" * (len(STAGES) + 3)]
    for row in rows:
        cost = row["edit_cost"]
        per, rise = cost["stage_rss_peak_above_start_mb"], cost["stage_rss_rise_mb"]
        cells = [f"{per[s]:.0f} / {rise[s]:.0f}" if s in per else "-" for s in STAGES]
        lines.append(f"| {row['n']} | {cost['rss_peak_above_start_mb']:.0f} | " + " | ".join(cells)
                     + f" | {cost['cpu_seconds']:.0f} |")
    return "\n".join(lines)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hparams", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--n", default="10,100,1000", help="comma list of batch sizes")
    parser.add_argument("--draw", type=int, default=1000, help="cases drawn (as bench-scale batch --n max)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--targets", required=True, help="a bench-scale target cache folder (<out>/targets)")
    parser.add_argument("--target-chunk", type=int, default=50)
    parser.add_argument("--out", required=True)
    parser.add_argument("--mmap-threshold", type=int, default=0,
                        help="bytes: run each size with glibc's MALLOC_MMAP_THRESHOLD_ fixed at this value, so that "
                             "freed activations go back to the system and RSS follows live memory (0: the "
                             "allocator's default, a threshold that grows and keeps freed blocks in the heap)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one is not None:
        row = one_size(args, args.one)
        row["malloc_mmap_threshold"] = os.environ.get("MALLOC_MMAP_THRESHOLD_")
        (out / f"n{args.one}.json").write_text(json.dumps(row, indent=1))
        return 0
    rows = []
    for n in [int(x) for x in args.n.split(",")]:
        path = out / f"n{n}.json"
        if not path.exists():  # resumable: one file per size
            env = dict(os.environ)
            if args.mmap_threshold:
                env["MALLOC_MMAP_THRESHOLD_"] = str(args.mmap_threshold)
            subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--one", str(n)],
                           check=True, env=env)
        rows.append(json.loads(path.read_text()))
    (out / "edit_memory.json").write_text(json.dumps(rows, indent=1))
    text = table(rows)
    (out / "edit_memory.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
