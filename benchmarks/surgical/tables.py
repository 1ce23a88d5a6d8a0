"""Markdown tables of the surgical-forgetting benches (``zerounlearn bench`` summary.json files).

    python benchmarks/surgical/tables.py results/surgical/n1 results/surgical/n5 ... \\
        [--seeds 1-3] [--json benchmarks/results/surgical/tables.json]

One row per (folder, method): Eff / Gen / Spe (mean ± std over seeds), Spe as a percentage of
the unedited model's Spe on the same seeds (ratio of the means), PPL and its change from base.
``--seeds`` restricts every folder to those seeds (read from the per-seed files), so a 10-seed
run can sit in a 3-seed scaling table.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Dict, List, Optional

from zerounlearn_editor.harness.bench_config import parse_seeds

KEYS = ("eff", "gen", "spe", "ppl")


def _per_seed(folder: Path, seeds: Optional[List[int]]) -> Dict[str, Dict[str, List[float]]]:
    """method -> metric -> values over the folder's complete (selected) seed files.

    A seed counts only when every method of the run finished ``ok`` in it (a seed still being
    computed, or one with a failed method, would otherwise pair rows from different seeds).
    """
    records = []
    for path in sorted(folder.glob("seed_*.json"), key=lambda p: int(p.stem.split("_")[1])):
        seed = int(path.stem.split("_")[1])
        if seeds is None or seed in seeds:
            records.append(json.loads(path.read_text(encoding="utf-8")))
    wanted = set().union(*(r["methods"] for r in records)) if records else set()
    out: Dict[str, Dict[str, List[float]]] = {}
    for data in records:
        if set(data["methods"]) != wanted or any(m.get("status") != "ok" for m in data["methods"].values()):
            continue
        for method, entry in data["methods"].items():
            for key in KEYS:
                value = (entry.get("metrics") or {}).get(key)
                if value is not None:
                    out.setdefault(method, {}).setdefault(key, []).append(float(value))
    return out


def _cell(values: List[float], digits: int = 1) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{digits}f} ± {std:.{digits}f}"


def table(folders: List[Path], seeds: Optional[List[int]]) -> tuple:
    lines = ["| run | n | seeds | method | Eff ↓ | Gen ↓ | Spe ↑ | Spe % of base | PPL | ΔPPL |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for folder in folders:
        first = sorted(folder.glob("seed_*.json"))
        if not first:
            continue
        summary = json.loads(first[0].read_text(encoding="utf-8"))["run"]  # n, data, ... (summary.json comes last)
        stats = _per_seed(folder, seeds)
        base = stats.get("base", {})
        for method, metrics in stats.items():
            k = len(metrics.get("eff", []))
            spe_pct = (100 * statistics.fmean(metrics["spe"]) / statistics.fmean(base["spe"])
                       if metrics.get("spe") and base.get("spe") and statistics.fmean(base["spe"]) else None)
            dppl = (100 * (statistics.fmean(metrics["ppl"]) / statistics.fmean(base["ppl"]) - 1)
                    if metrics.get("ppl") and base.get("ppl") else None)
            rows.append(dict(run=folder.name, n=summary["n"], seeds=k, method=method,
                             **{key: statistics.fmean(metrics[key]) if metrics.get(key) else None for key in KEYS},
                             spe_pct_of_base=spe_pct, ppl_change_pct=dppl))
            lines.append(
                f"| {folder.name} | {summary['n']} | {k} | {method} | {_cell(metrics.get('eff', []))} | "
                f"{_cell(metrics.get('gen', []))} | {_cell(metrics.get('spe', []))} | "
                f"{'-' if spe_pct is None else f'{spe_pct:.0f}%'} | {_cell(metrics.get('ppl', []), 2)} | "
                f"{'-' if dppl is None else f'{dppl:+.1f}%'} |"
            )
    return "\n".join(lines), rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--seeds", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds) if args.seeds else None
    text, rows = table([Path(f) for f in args.folders], seeds)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"seeds": seeds, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
