"""Markdown rows of bench-scale batch JSON files (one line per row file), for RESULTS.md.

Usage: python benchmarks/scale/rows_table.py benchmarks/results/scale/<dir>/seed_*/<tag>_n<n>.json ...
"""
from __future__ import annotations

import json
import sys


def _pct(after: float, before: float) -> str:
    return f"{100 * after / before:.0f}%" if before else "-"


def _last_layer_change(r: dict) -> str:
    """The relative weight change of the last edited layer (SmolLM2's 18; Gemma-3-270m's 5), with its index."""
    changes = {int(k): v for k, v in r["details"]["layer_change_norm"].items()}
    last = max(changes)
    return f"{changes[last]:.2f} ({last})"


def row(path: str) -> str:
    r = json.load(open(path))
    m, b = r["metrics"], r["base"]
    known = m.get("known_count", 0)
    kf = f"{b['eff_first_known']:.1f} -> {m['eff_first_known']:.1f}" if known else "-"
    ke = f"{b['eff_known']:.1f} -> {m['eff_known']:.1f}" if known else "-"
    cpu = (r.get("targets_cpu_seconds") or 0) + r["edit_cost"]["cpu_seconds"]
    return (f"| {r['hparams'].split('/')[-1]} | {r['seed']} | {r['n']} | {known} | {kf} | {ke} | "
            f"{b['eff']:.1f} -> {m['eff']:.1f} | {b['spe']:.1f} -> {m['spe']:.1f} ({_pct(m['spe'], b['spe'])}) | "
            f"{100 * (m['ppl'] / b['ppl'] - 1):+.1f}% | {_last_layer_change(r)} | "
            f"{cpu:.0f} | {r['edit_cost']['rss_peak_above_start_mb']:.0f} |")


HEADER = ("| YAML | seed | n | known | known Eff 1st token | known Eff | Eff (all) | Spe (% of base) | PPL | "
          "last edited layer's change | CPU s (targets + edit) | edit RSS peak MB |\n" + "|---" * 12 + "|")

if __name__ == "__main__":
    print(HEADER)
    for p in sys.argv[1:]:
        print(row(p))
