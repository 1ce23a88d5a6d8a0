"""The bench's summary: ``summary.json`` (every metric, mean/std/values over seeds) and
``summary.md`` (the paper's table: rows = methods, "mean ± std" over seeds).

std is the sample standard deviation over seeds (0 with a single seed). Metrics with no value
(e.g. perplexity switched off, fluency not asked for) are left out of the table. Probe-group
metrics (``group_<name>``, RWKU's levels) are columns right after Spe, headed by
:func:`group_header` (``forget_level1`` -> ``FL1 ↓``, ``neighbor_level2`` -> ``NL2 ↑``).
"""
from __future__ import annotations

import math
from pathlib import Path
from statistics import fmean, stdev
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from zerounlearn_editor.harness.bench_config import BenchConfig
from zerounlearn_editor.harness.case_scoring import AUDIT_PREFIX, CONTAINS_PREFIX, GROUP_PREFIX, METRIC_KEYS
from zerounlearn_editor.harness.retain_sets import parse_retain_spec
from zerounlearn_editor.support.files import write_json_atomic, write_text_atomic

__all__ = ["aggregate", "summarize", "format_table", "group_header", "write_summary", "ppl_tokens_text", "COLUMNS"]

COLUMNS = (
    # (metric key, header, format)
    ("eff", "Eff ↓", "{:.1f}"),
    ("gen", "Gen ↓", "{:.1f}"),
    ("spe", "Spe ↑", "{:.1f}"),
    ("ppl", "PPL ↓", "{:.2f}"),
    ("eff_first", "Eff 1st ↓", "{:.1f}"),
    ("gen_first", "Gen 1st ↓", "{:.1f}"),
    ("eff_prob", "Eff p ↓", "{:.3f}"),
    ("gen_prob", "Gen p ↓", "{:.3f}"),
    ("spe_prob", "Spe p ↑", "{:.3f}"),
    ("spe_agree", "Spe agree ↑", "{:.1f}"),
    ("fluency", "Flu ↑", "{:.2f}"),
    ("edit_seconds", "Edit s", "{:.1f}"),
)


def group_header(name: str) -> str:
    """The table header of probe group ``name``: RWKU's ``forget_levelK`` -> ``FLK ↓``,
    ``neighbor_levelK`` -> ``NLK ↑``; any other name as it is, ``↓`` when it starts with
    ``forget`` (accuracy that should drop), else ``↑`` (knowledge to keep)."""
    for prefix, short in (("forget_level", "FL"), ("neighbor_level", "NL"), ("neighbour_level", "NL")):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return f"{short}{name[len(prefix):]} {'↓' if short == 'FL' else '↑'}"
    return f"{name} {'↓' if name.startswith('forget') else '↑'}"


def aggregate(values: Sequence[Optional[float]]) -> Optional[Dict[str, Any]]:
    """``{"mean", "std", "n", "values"}`` over the finite values, or None when there are none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return None
    return {
        "mean": fmean(finite),
        "std": stdev(finite) if len(finite) > 1 else 0.0,
        "n": len(finite),
        "values": finite,
    }


def summarize(methods: Sequence[str], records: Mapping[int, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per method: status, seeds with results, skip reasons and aggregated metrics."""
    out: Dict[str, Dict[str, Any]] = {}
    for name in methods:
        entries = [(seed, r.get("methods", {}).get(name)) for seed, r in records.items()]
        ok = [(seed, e) for seed, e in entries if e and e.get("status") == "ok"]
        skipped = [e for _, e in entries if e and e.get("status") in ("skipped", "error")]
        metrics = {}
        utility_keys = sorted({k for _, e in ok for k in e["metrics"] if k.startswith("util_")})
        group_keys = list(dict.fromkeys(k for _, e in ok for k in e["metrics"]
                                        if k.startswith((GROUP_PREFIX, CONTAINS_PREFIX, AUDIT_PREFIX))))
        for key in (*METRIC_KEYS, *group_keys, *utility_keys):
            stats = aggregate([e["metrics"].get(key) for _, e in ok])
            if stats is not None:
                metrics[key] = stats
        if ok:
            status = "ok" if len(ok) == len(entries) else "partial"
        elif skipped:
            status = "error" if any(e.get("status") == "error" for e in skipped) else "skipped"
        else:
            status = "missing"
        item: Dict[str, Any] = {"status": status, "seeds": [seed for seed, _ in ok], "metrics": metrics}
        reasons = sorted({e.get("reason", "") for e in skipped})  # skip reasons and errors
        if reasons:
            item["reason"] = "; ".join(reasons)
        out[name] = item
    return out


def _cell(stats: Optional[Mapping[str, Any]], fmt: str) -> str:
    if stats is None:
        return "-"
    return f"{fmt.format(stats['mean'])} ± {fmt.format(stats['std'])}"


def format_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """The markdown table: one row per method, columns that hold at least one value."""
    utility = sorted({k for m in summary.values() for k in m["metrics"] if k.startswith("util_")})
    groups = list(dict.fromkeys(k for m in summary.values() for k in m["metrics"] if k.startswith(GROUP_PREFIX)))
    group_columns = [(k, group_header(k[len(GROUP_PREFIX):]), "{:.1f}") for k in groups]  # after Spe
    contains = list(dict.fromkeys(k for m in summary.values() for k in m["metrics"] if k.startswith(CONTAINS_PREFIX)))
    group_columns += [(k, group_header(k[len(CONTAINS_PREFIX):]).replace(" ", " gen ", 1), "{:.1f}") for k in contains]
    columns = list(COLUMNS[:3]) + group_columns + list(COLUMNS[3:])
    columns += [(k, f"{k[len('util_'):]} ↑", "{:.1f}") for k in utility]  # zerounlearn utility tasks
    audit = list(dict.fromkeys(k for m in summary.values() for k in m["metrics"] if k.startswith(AUDIT_PREFIX)))
    columns += [(k, f"{k[len(AUDIT_PREFIX):]} ↓", "{:.0f}") for k in audit]  # zerounlearn bench --audit: recovered %
    used = [c for c in columns if any(c[0] in m["metrics"] for m in summary.values())]
    if not used:
        used = list(COLUMNS[:3])
    lines = [
        "| Method | " + " | ".join(header for _, header, _ in used) + " | Seeds |",
        "|---|" + "---|" * len(used) + "---|",
    ]
    notes: List[str] = []
    for name, item in summary.items():
        if not item["metrics"]:
            reason = item.get("reason") or "no result"
            lines.append(f"| {name} | {reason} |" + " |" * len(used))
            continue
        cells = [_cell(item["metrics"].get(key), fmt) for key, _, fmt in used]
        seeds = str(len(item["seeds"])) + (" (partial)" if item["status"] == "partial" else "")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {seeds} |")
        if item.get("reason"):
            notes.append(f"- {name}, other seeds: {item['reason']}")
    return "\n".join(lines + ([""] + notes if notes else []))


def _seed_text(seeds: Sequence[int]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


_GROUP_NOTE = (
    "Probe-group columns (RWKU): FL1 / FL2 / FL3 = the same token accuracy on the target's forget probes "
    "of level 1 (cloze, text before the blank), level 2 (questions), level 3 (adversarial); NL1 / NL2 = on "
    "the neighbour probes of levels 1 / 2 (knowledge to keep). This is a teacher-forced version of RWKU's "
    "scoring (RWKU generates an answer and scores ROUGE recall); forgetting = the drop from the base row. "
    "`gen` columns (with `--group-generation`): % of the group's probes whose 16-token greedy continuation "
    "contains the answer (case-insensitive)."
)


def ppl_tokens_text(records: Iterable[Mapping[str, Any]], option: int) -> str:
    """The perplexity tokens the seed ``records`` measured (their ``ppl_tokens_measured``: the first ``option``
    tokens of the text, fewer when it is shorter; several counts joined by " / "), else ``option`` (records
    written before the count was stored)."""
    counts = sorted({int(r["ppl_tokens_measured"]) for r in records if r.get("ppl_tokens_measured")})
    return " / ".join(map(str, counts)) if counts else str(option)


def _markdown(config: BenchConfig, run_info: Mapping[str, Any], table: str,
              known: Optional[Mapping[str, Any]] = None, per_method: Optional[Mapping[str, Any]] = None,
              dropped: Optional[Mapping[str, int]] = None, ppl_tokens: str = "") -> str:
    title = config.name or f"{config.data}, n={config.n}"
    ppl = (
        f"perplexity on the first {ppl_tokens or config.ppl_tokens} tokens of {run_info.get('ppl_text')}"
        if config.ppl_tokens > 0
        else "perplexity not measured"
    )
    lines: List[str] = [
        f"# Unlearning bench: {title}",
        "",
        f"- model: `{run_info.get('model')}`, hparams: `{config.hparams}`",
        f"- data: `{config.data}`, n = {config.n} cases per seed (edited as one batch), "
        f"seeds {_seed_text(config.seeds)} ({len(config.seeds)})",
        f"- {ppl}"
        + (f"; fluency = n-gram entropy of {config.fluency_tokens}-token greedy generations" if config.fluency else ""),
        *(
            [f"- {parse_retain_spec(config.retain).describe()} (`--retain {config.retain}`; rows ending in +R use it)"]
            if parse_retain_spec(config.retain)
            else []
        ),
        *(
            [
                f"- known-only: {known['qualified']} of {known['candidates']} cases reach forget-prompt token accuracy "
                f">= {known['min_accuracy']:g} on the unedited model; seeds sample from those"
            ]
            if known
            else []
        ),
        *(
            [
                f"- neighbour probes that another case of the same batch forgets are not scored as neighbours "
                f"(`bench.neighbours`): {sum(dropped.values())} over the seeds "
                f"({', '.join(f'seed {seed}: {count}' for seed, count in dropped.items())})"
            ]
            if dropped
            else []
        ),
        "",
        table,
        "",
        "Eff / Gen: teacher-forced token accuracy (%) of the true answer on the forget prompts / their "
        "paraphrases (lower = more forgotten); Spe: the same for the neighbourhood prompts' own answers "
        "(higher = better kept). `p` columns: mean answer probability (geometric mean over answer tokens). "
        "Spe agree: % of neighbourhood answer positions whose argmax token is unchanged by the edit. "
        "Edit s: wall time of the edit (statistics precomputed). Values: mean ± sample std over seeds.",
        "",
        *(
            [_GROUP_NOTE, ""]
            if per_method and any(k.startswith(GROUP_PREFIX) for m in per_method.values() for k in m["metrics"])
            else []
        ),
    ]
    return "\n".join(lines)


def write_summary(
    out: Path,
    config: BenchConfig,
    run_info: Mapping[str, Any],
    methods: Sequence[str],
    records: Mapping[int, Mapping[str, Any]],
    known: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Write ``summary.json`` and ``summary.md`` into ``out``; returns the JSON content.

    ``known``: with ``known_only``, ``{"qualified", "candidates", "min_accuracy"}`` (how many
    cases the unedited model knows); stored as ``summary["known_cases"]`` and stated in the
    markdown. Seeds whose records carry ``neighbours_dropped`` (:mod:`.neighbours`) are listed
    as ``summary["neighbours_dropped"]`` (``{seed: count}``) and stated in the markdown.
    """
    per_method = summarize(methods, records)
    table = format_table(per_method)
    summary = {
        "name": config.name,
        "hparams": config.hparams,
        "data": config.data,
        "n": config.n,
        "seeds": list(config.seeds),
        "run": dict(run_info),
        "methods": per_method,
        "table_markdown": table,
    }
    if known is not None:
        summary["known_cases"] = dict(known)
    counts = {str(seed): int(record.get("neighbours_dropped", 0)) for seed, record in records.items()}
    dropped = counts if any(counts.values()) else None
    if dropped:
        summary["neighbours_dropped"] = dropped
    if config.ppl_tokens > 0:
        summary["ppl_tokens_measured"] = ppl_tokens_text(records.values(), config.ppl_tokens)
    write_json_atomic(Path(out) / "summary.json", summary)
    write_text_atomic(Path(out) / "summary.md", _markdown(config, run_info, table, known, per_method, dropped,
                                                          summary.get("ppl_tokens_measured", "")))
    return summary
