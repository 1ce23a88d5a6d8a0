"""The audit's summary: ``audit.json`` (per method and probe, recovered % mean/std over seeds),
``audit.md`` (rows = methods, columns = probes) and ``audit.png`` (method x probe heatmap).

The relearning probes get a derived column ``<probe>/kept`` each (:func:`kept_by_base`): the
recovered % over only the facts the unedited model still answers after the same fine-tuning."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from zerounlearn_editor.evaluation.audit.suite import UNINFORMATIVE_MAX
from zerounlearn_editor.harness.report import aggregate
from zerounlearn_editor.support.files import write_json_atomic, write_text_atomic
from zerounlearn_editor.support.plotting import pyplot, save_figure

__all__ = ["summarize_audit", "format_audit_table", "plot_heatmap", "write_audit_summary", "kept_by_base",
           "same_relation_counts", "KEPT_SUFFIX", "PROBE_NOTE"]

LOG = logging.getLogger(__name__)

PROBE_NOTE = (
    "Recovered % = forgotten facts (all of them are the denominator) for which the probe makes the answer's first "
    "token the greedy next token (the project's first-token accuracy; any of a fact's prompts counts). prompt / "
    "paraphrase / question / chat: the fact's prompt, its paraphrases, `Q: ... A:`, the model's chat template "
    "(assistant turn opened with the prompt); icK: K borrowed facts (same relation first, never a forgotten subject "
    "or answer) before the prompt; mc: the true answer's log-probability above 3 distractors' (chance 25); "
    "lens:X: the answer's first token in the top 10 of the logit lens at some layer from the first edited one on; "
    "int8 / int4 / int4g16:X: X on a round-to-nearest copy (per channel; int4g16: groups of 16); relearn-S / "
    "generic-S: the prompt after fine-tuning a copy (scope S: mlp or full) on related facts whose answers are not "
    "forgotten / on generic text (the control); rtt-S: the held-out half of the forgotten facts (the % is over "
    "them) after the same fine-tuning on the other half's prompts and true answers (RTT's split, arXiv 2410.08827); "
    "X/kept: X over only the facts the unedited model still answers after "
    "the same fine-tuning (the base row's X), so a fine-tune that overwrites facts by itself does not count as "
    "forgetting; rwku_*: RWKU's own forget levels. Values: mean ± std over seeds."
)


KEPT_SUFFIX = "/kept"
"""Suffix of the derived relearning columns (:func:`kept_by_base`)."""

_KEPT_PREFIXES = ("relearn-", "generic-", "rtt-")


def kept_by_base(probes: Mapping[str, Any], base: Optional[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """The relearning columns measured against the unedited model under the same fine-tuning.

    Fine-tuning a copy on related facts (or generic text) also changes facts that were never
    edited: the unedited model's own recall after it (its ``relearn-S`` row) is well below 100 %.
    So for each ``relearn-S`` / ``generic-S`` / ``rtt-S`` probe, ``<probe>/kept`` is the % of the facts the
    unedited model still answers after that same fine-tuning (same seed, same data) that the
    edited model answers after it: 100 = the edit is undone wherever the fine-tuning itself leaves
    the fact, 0 = none of those comes back. ``None`` when the base row lacks the probe or keeps no fact.

    Args:
        probes: one method's probe results of one seed (``{"<probe>": {"items": [0/1 per fact], ...}}``).
        base: the ``base`` row's probe results of the same seed (or ``None``).

    Returns:
        ``{"<probe>/kept": {"recovered": % or None, "n": kept facts, "items": [0/1 per kept fact]}}``.
    """
    out: Dict[str, Dict[str, Any]] = {}
    for name, result in probes.items():
        if not name.startswith(_KEPT_PREFIXES) or name.endswith(KEPT_SUFFIX):
            continue
        reference = (base or {}).get(name)
        if not reference or "items" not in reference or "items" not in result:
            continue
        if len(reference["items"]) != len(result["items"]):
            raise ValueError(
                f"audit {name}: {len(result['items'])} facts against the base row's {len(reference['items'])}"
            )
        flags = [int(f) for f, kept in zip(result["items"], reference["items"]) if kept]
        out[name + KEPT_SUFFIX] = {"recovered": 100.0 * sum(flags) / len(flags) if flags else None,
                                   "n": len(flags), "items": flags}
    return out


def _with_kept(entry: Mapping[str, Any], base: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    probes = dict(entry.get("probes", {}))
    base_probes = base.get("probes") if base and base.get("status") == "ok" else None
    derived = kept_by_base(probes, base_probes)
    ordered: Dict[str, Any] = {}
    for name, result in probes.items():
        ordered[name] = result
        if name + KEPT_SUFFIX in derived:
            ordered[name + KEPT_SUFFIX] = derived[name + KEPT_SUFFIX]
    return {**entry, "probes": ordered}


def summarize_audit(methods: Sequence[str], records: Mapping[int, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per method: status, seeds with results, reasons, and per probe the aggregated recovered %."""
    out: Dict[str, Dict[str, Any]] = {}
    for name in methods:
        entries = [(seed, r.get("methods", {}).get(name)) for seed, r in records.items()]
        ok = [(seed, _with_kept(e, records[seed].get("methods", {}).get("base")))
              for seed, e in entries if e and e.get("status") == "ok"]
        probes = list(dict.fromkeys(p for _, e in ok for p in e["probes"]))
        stats = {p: aggregate([e["probes"].get(p, {}).get("recovered") for _, e in ok]) for p in probes}
        item: Dict[str, Any] = {
            "status": ("ok" if len(ok) == len(entries) else "partial") if ok else "missing",
            "seeds": [seed for seed, _ in ok],
            "recovered": {p: s for p, s in stats.items() if s is not None},
        }
        kept = {
            p: sum(e["probes"][p]["n"] for _, e in ok if p in e["probes"]) for p in probes if p.endswith(KEPT_SUFFIX)
        }
        if kept:
            item["kept_facts"] = kept
        reasons = sorted({e.get("reason", "") for _, e in entries if e and e.get("status") in ("skipped", "error")})
        if reasons:
            item["reason"] = "; ".join(reasons)
            if not ok:
                item["status"] = "skipped"
        out[name] = item
    return out


def _columns(summary: Mapping[str, Mapping[str, Any]]) -> List[str]:
    return list(dict.fromkeys(p for m in summary.values() for p in m["recovered"]))


def format_audit_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown: one row per method, one column per probe, "mean ± std" recovered %."""
    columns = _columns(summary)
    lines = ["| Method | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for name, item in summary.items():
        if not item["recovered"]:
            lines.append(f"| {name} | {item.get('reason') or 'no result'} |" + " |" * (len(columns) - 1))
            continue
        cells = []
        for probe in columns:
            s = item["recovered"].get(probe)
            cells.append(
                "-" if s is None else (f"{s['mean']:.0f}" if s["n"] == 1 else f"{s['mean']:.0f} ± {s['std']:.0f}")
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_heatmap(summary: Mapping[str, Mapping[str, Any]], path: Path, title: str = "") -> Optional[Path]:
    """Method x probe heatmap of the mean recovered % (``None`` when matplotlib is missing)."""
    plt = pyplot('the audit heatmap')
    if plt is None:
        return None
    import numpy as np

    columns = _columns(summary)
    rows = [name for name, item in summary.items() if item["recovered"]]
    if not rows or not columns:
        return None
    values = np.full((len(rows), len(columns)), np.nan)
    for i, name in enumerate(rows):
        for j, probe in enumerate(columns):
            s = summary[name]["recovered"].get(probe)
            if s is not None:
                values[i, j] = s["mean"]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(columns) + 2.5), 0.5 * len(rows) + 2.2))
    image = ax.imshow(np.ma.masked_invalid(values), cmap="Reds", vmin=0, vmax=100, aspect="auto")
    ax.set_xticks(range(len(columns)), columns, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=9)
    for i in range(len(rows)):
        for j in range(len(columns)):
            if not np.isnan(values[i, j]):
                ax.text(j, i, f"{values[i, j]:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if values[i, j] > 60 else "black")
    fig.colorbar(image, ax=ax, label="recovered %")
    ax.set_title(title or "facts recovered by each probe (%)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def same_relation_counts(records: Mapping[int, Mapping[str, Any]]) -> Dict[str, Dict[str, int]]:
    """Per borrowing probe (``icK``, ``mc``, ``relearn``), summed over the seeds' plans: ``{"items": facts that got
    same-relation material, "of": facts}``
    (:attr:`~zerounlearn_editor.evaluation.audit.plan.AuditPlan.same_relation`)."""
    out: Dict[str, Dict[str, int]] = {}
    for record in records.values():
        plan = record.get("plan") or {}
        for probe, count in (plan.get("same_relation") or {}).items():
            entry = out.setdefault(probe, {"items": 0, "of": 0})
            entry["items"] += int(count)
            entry["of"] += int(plan.get("n_items", 0))
    return out


def write_audit_summary(out: Path, header: Mapping[str, Any], methods: Sequence[str],
                        records: Mapping[int, Mapping[str, Any]]) -> Dict[str, Any]:
    """Write ``audit.json``, ``audit.md`` and ``audit.png`` into ``out``; returns the JSON content."""
    per_method = summarize_audit(methods, records)
    table = format_audit_table(per_method)
    same = same_relation_counts(records)
    base = per_method.get("base", {}).get("recovered", {})
    flat = [p for p, s in base.items() if not p.endswith(KEPT_SUFFIX) and s["mean"] <= UNINFORMATIVE_MAX]
    summary = {**header, "seeds": sorted(records), "methods": per_method, "table_markdown": table,
               "same_relation": same, "uninformative": flat}
    out = Path(out)
    png = plot_heatmap(per_method, out / "audit.png", f"{header.get('data')}, n={header.get('n')}: recovered %")
    summary["plot"] = str(png) if png else None
    write_json_atomic(out / "audit.json", summary)
    lines = [f"# Robustness audit: {header.get('data')}, n = {header.get('n')}", "",
             f"- model: `{header.get('model')}`, hparams: `{header.get('hparams')}`, seeds {sorted(records)}",
             f"- settings: `{header.get('settings')}`", "", table, ""]
    if header.get("n_requested"):
        lines += [f"n = {header.get('n')} facts audited per seed: {header['n_requested']} were asked for, the data "
                  "has no more.", ""]
    if same:
        lines += ["Same-relation material (facts, all seeds): " + ", ".join(
            f"{p} {c['items']}/{c['of']}" + (" (fewer than half: a weak test)" if 2 * c["items"] < c["of"] else "")
            for p, c in same.items()), ""]
    if flat:
        lines += [
            f"Uninformative probes (the unedited model recovers <= {UNINFORMATIVE_MAX:.0f} %, so they cannot show "
            f"forgetting): {', '.join(flat)}.",
            "",
        ]
    lines += [PROBE_NOTE, ""]
    write_text_atomic(out / "audit.md", "\n".join(lines))
    return summary
