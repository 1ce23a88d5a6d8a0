"""Issue 48, RESULTS 12.15: tables of ``layers_diag.py`` runs on Gemma, per seed, pooled and paired by case.

Each argument is ``[LABEL=]path`` of a ``layers_diag.py`` JSON with per-case rows; ``--log path`` per JSON (same
order, optional) reads the text weight the edit set at its first edited layer (``text weight W (set here; key reach
asked A, here A0 at w = 0 ...``). Every CounterFact case of these files has one neighbour prompt, so Spe is a count of
neighbour answers (after the edit over the unedited model's, as 12.13 / 12.14 count). ``--pair A,B`` adds, for two
variant names, the cases where they differ (neighbour answers one keeps and the other loses, facts one leaves
answered), matched by seed and case id across files. ``--lost VARIANT`` lists the neighbour prompts that variant
loses (read from the JSON's data file). Markdown to stdout.

    D=benchmarks/results/gemma/retain_reach
    python benchmarks/gemma/retain_reach_table.py $D/report_val_seed{1,2,3}_n50.json --pair kr06,kr06R --lost kr06R
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

WEIGHT_LINE = re.compile(r"layer (\d+): text weight ([0-9.e+-]+) \(set here; key reach asked ([0-9.]+), here ([0-9.]+)")

Row = Dict[str, object]


def first_layer_weights(log: Optional[str]) -> List[Tuple[float, float]]:
    """``[(w, A0)]``: the weight each edit of a log set at its first layer and that layer's reach at ``w = 0``."""
    if not log:
        return []
    return [(float(m.group(2)), float(m.group(4))) for m in WEIGHT_LINE.finditer(Path(log).read_text())]


def counts(rows: Sequence[Row], base_rows: Sequence[Row]) -> Tuple[int, int, float, float]:
    """(answered, cases, neighbour answers after the edit, the unedited model's), rows in the same case order."""
    return (sum(bool(r["answered"]) for r in rows), len(rows), sum(sum(r["neighbour_acc"]) for r in rows),
            sum(sum(r["neighbour_acc"]) for r in base_rows))


def cell(answered: int, n: int, kept: float, base: float) -> str:
    """``answered of n | kept of base (share)``."""
    share = f"{100 * kept / base:.0f}%" if base else "-"
    return f"{answered} of {n} | {kept:g} of {base:g} ({share})"


def variants(data: Dict, weights: Sequence[Tuple[float, float]]) -> Iterator[Tuple[str, Dict, str]]:
    """``(name, variant, w set)``; ``weights`` in the run's variant order, one per variant with a key reach."""
    pending = list(weights)
    for name, v in data["variants"].items():
        settings = v["settings"]  # runs before the key graduated stored it under experimental:
        reach = isinstance(settings.get("nullspace_text_weight", settings.get("experimental", {}).get(
            "nullspace_text_weight")), dict)
        w = f"{pending.pop(0)[0]:.2f}" if reach and pending else ("0" if not reach else "?")
        yield name, v, w


def pair_rows(runs: Sequence[Dict], a: str, b: str) -> Dict[str, int]:
    """Neighbour answers kept by ``a`` not ``b`` and the reverse, facts answered by ``a`` not ``b`` and the reverse,
    over every (seed, case) both variants were run on."""
    rows: Dict[str, Dict[Tuple[int, int, str], Row]] = {a: {}, b: {}}
    for data in runs:
        for name in (a, b):
            if name in data["variants"]:
                for r in data["variants"][name]["per_case"]:
                    rows[name][(data["seed"], data["n"], r["case_id"])] = r
    out = dict(cases=0, spe_a_only=0, spe_b_only=0, answered_a_only=0, answered_b_only=0)
    for key in rows[a].keys() & rows[b].keys():
        ra, rb = rows[a][key], rows[b][key]
        ka, kb = sum(ra["neighbour_acc"]), sum(rb["neighbour_acc"])
        out["cases"] += 1
        out["spe_a_only"] += max(0.0, ka - kb)
        out["spe_b_only"] += max(0.0, kb - ka)
        out["answered_a_only"] += int(bool(ra["answered"]) and not rb["answered"])
        out["answered_b_only"] += int(bool(rb["answered"]) and not ra["answered"])
    return out


def lost_prompts(data: Dict, name: str) -> List[str]:
    """The neighbour prompts the unedited model answers and variant ``name`` does not (its data file's prompts)."""
    from zerounlearn_editor.data.datasets import load_cases  # only here: the tables need no package import

    cases = {c.case_id: c for c in load_cases("counterfact-easyedit", path=data["data_path"])}
    out = []
    for base, post in zip(data["per_case"], data["variants"][name]["per_case"]):
        for i, (before, after) in enumerate(zip(base["neighbour_acc"], post["neighbour_acc"])):
            if before >= 1.0 and after < 1.0:
                probe = cases[base["case_id"]].neighbour[i]
                out.append(f"{probe.prompt} -> {probe.answer}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="[LABEL=]layers_diag.py JSON")
    ap.add_argument("--log", action="append", default=[], help="the run's log, in the order of the runs")
    ap.add_argument("--pair", action="append", default=[], help="two variant names, A,B")
    ap.add_argument("--lost", action="append", default=[], help="a variant whose lost neighbour prompts to list")
    args = ap.parse_args()
    w = sys.stdout.write
    runs = []
    w("| run | seed, n | variant | `w` set (A0 at w = 0) | answered | Spe: neighbour answers after / before (% of "
      "base) | Spe agree | PPL (change) | weight change 3 / 4 / 5 | text change 3 / 4 / 5 | retain facts |\n")
    w("|---|---|---|---|---|---|---|---|---|---|---|\n")
    pooled: Dict[str, List[float]] = {}
    for index, spec in enumerate(args.runs):
        label, _, path = spec.rpartition("=")
        data = json.loads(Path(path).read_text())
        runs.append(data)
        weights = first_layer_weights(args.log[index] if index < len(args.log) else None)
        base_ppl = data["base"]["ppl"]
        for name, v, wset in variants(data, weights):
            a, n, k, b = counts(v["per_case"], data["per_case"])
            total = pooled.setdefault(name, [0, 0, 0, 0])
            for i, x in enumerate((a, n, k, b)):
                total[i] += x
            a0 = next((f" ({x[1]:.2f})" for x in weights if f"{x[0]:.2f}" == wset), "")
            change = " / ".join(f"{v['layer_change_norm'][str(layer)]:.3f}" for layer in (3, 4, 5))
            text = " / ".join(f"{v['layers'][str(layer)]['text_change']:.3f}" for layer in (3, 4, 5))
            ppl = v["metrics"]["ppl"]
            rise = 100 * (ppl / base_ppl - 1)
            w(f"| {label or Path(path).stem} | {data['seed']}, {data['n']} | {name} | {wset}{a0} | "
              f"{cell(a, n, k, b)} | {v['metrics']['spe_agree']:.0f} | {ppl:.2f} ({rise:+.1f}%) | "
              f"{change} | {text} | {v.get('retain_count', '-')} |\n")
    w("\n| pooled over the runs | answered | Spe: neighbour answers after / before (% of base) |\n|---|---|---|\n")
    for name, (a, n, k, b) in pooled.items():
        w(f"| {name} | {cell(int(a), int(n), k, b)} |\n")
    for pair in args.pair:
        a, b = pair.split(",")
        p = pair_rows(runs, a, b)
        w(f"\npaired {a} vs {b} on {p['cases']} case draws: neighbour answers {a} only {p['spe_a_only']:g}, {b} only "
          f"{p['spe_b_only']:g}; facts still answered {a} only {p['answered_a_only']}, {b} only "
          f"{p['answered_b_only']}\n")
    for name in args.lost:
        for data in runs:
            if name in data["variants"]:
                w(f"\nlost by {name}, seed {data['seed']}, n {data['n']}:\n")
                for line in lost_prompts(data, name):
                    w(f"- {line}\n")


if __name__ == "__main__":
    main()
