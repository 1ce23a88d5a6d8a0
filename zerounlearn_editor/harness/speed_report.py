"""The speed bench's markdown report (:func:`format_speed_markdown`) of :func:`~.speed_bench.run_speed`'s result."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = ["format_speed_markdown"]


def _mb(row: Dict[str, Any], prefix: str = "") -> str:
    return f"{row[prefix + 'peak_mb']:.0f} (+{row[prefix + 'peak_delta_mb']:.0f})"


def _header(env: Dict[str, Any]) -> List[str]:
    """The device, model and memory-unit line."""
    kind = "CUDA allocated" if env["device"].startswith("cuda") else "RSS"
    return [
        f"Device `{env['device']}`{' (' + env['gpu'] + ')' if 'gpu' in env else ''}, model `{env['model']}` "
        f"({env['parameters'] / 1e6:.0f}M parameters, {env['dtype']}), torch {env['torch']}, {env['threads']} "
        "thread(s). "
        f"Memory: peak {kind} in MB (+ increase during the stage).",
        "",
    ]


def _statistics_table(rows: List[Dict[str, Any]]) -> List[str]:
    """The statistics stage, one row per pipeline (no lines without rows)."""
    if not rows:
        return []
    lines = ["**Statistics stage** (empty cache)", "",
             "| pipeline | corpus passes | tokens | s | CPU s | tokens/s | s per 1k tokens | peak MB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['pipeline']} | {r['corpus_passes']} | {r['tokens']} | {r['seconds']:.1f} | {r['cpu_s']:.1f} | "
            f"{r['tokens_per_s']:.0f} | {r['s_per_1k_tokens']:.3f} | {_mb(r)} |"
        )
    return lines + [""]


def _micro_table(micro: Optional[Dict[str, Any]]) -> List[str]:
    """The statistics micro-benchmark (no lines without one)."""
    if not micro:
        return []
    lines = [f"**Statistics micro-benchmark** ({micro['passages']} passages)", "",
             "| mode | passes | s | CPU s | tokens/s | time / one pass for all layers (wall, CPU) | peak MB |",
             "|---|---|---|---|---|---|---|"]
    for r in micro["rows"]:
        lines.append(
            f"| {r['mode']} | {r['passes']} | {r['seconds']:.1f} | {r['cpu_s']:.1f} | {r['tokens_per_s']:.0f} | "
            f"{r['ratio_vs_one_pass']:.2f}, {r['cpu_ratio_vs_one_pass']:.2f} | {_mb(r)} |"
        )
    return lines + [""]


def _edits_table(rows: List[Dict[str, Any]]) -> List[str]:
    """The edit stages, one row per timed edit (no lines without rows)."""
    if not rows:
        return []
    lines = [
        "**Edit stages** (seconds; statistics precomputed)",
        "",
        "| method | pipeline | targets_optimizer | n | contexts | targets | keys | solve | write-back | edit total "
        "| edit CPU s | edit peak MB | eval (forget prompts) | eval peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["stages_s"]
        lines.append(f"| {r['method']} | {r['pipeline']} | {r.get('targets_optimizer', '-')} | {r['n']} | "
                     f"{s['contexts']:.2f} | {s['targets']:.1f} | "
                     f"{s['keys']:.2f} | {s['solve']:.2f} | {s['write_back']:.3f} | {r['edit_s']:.1f} | "
                     f"{r['edit_cpu_s']:.1f} | {_mb(r, 'edit_')} | {r['eval_s']:.2f} | {_mb(r, 'eval_')} |")
    return lines + [""]


def _optimizers_table(rows: Optional[List[Dict[str, Any]]]) -> List[str]:
    """The targets optimisers of the ``ours`` pipeline against the reference (no lines without rows)."""
    if not rows:
        return []
    lines = [
        "**Target optimisers** (ours pipeline; per-request = the reference structure with Adam)",
        "",
        "| method | n | targets_optimizer | targets s | edit s | edit CPU s | per-request / this (wall, CPU) | "
        "target NLL mean | target steps mean | forget acc |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = ("-" if r["per_request_over_this"] is None
                 else f"{r['per_request_over_this']:.2f}x, {r['per_request_over_this_cpu']:.2f}x")
        lines.append(
            f"| {r['method']} | {r['n']} | {r['targets_optimizer']} | {r['targets_s']:.1f} | {r['edit_s']:.1f} | "
            f"{r['edit_cpu_s']:.1f} | {ratio} | {r['target_nll_mean']:.3f} | {r['target_steps_mean']:.1f} | "
            f"{r['eval_forget_acc']:.2f} |"
        )
    return lines + [""]


def _comparisons_table(rows: List[Dict[str, Any]]) -> List[str]:
    """The end-to-end ratios and weight gaps, ours against per-request (no lines without rows)."""
    if not rows:
        return []
    lines = [
        "**End to end** (edit with cached statistics; per-request: the paper's Adam loop)",
        "",
        "| method | n | ours (targets) | ours s | per-request s | per-request / ours | ours CPU s | per-request "
        "CPU s | CPU ratio | max abs diff of edited W | max rel diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        lines.append(
            f"| {c['method']} | {c['n']} | {c.get('ours_targets_optimizer', 'adam')} | {c['ours_s']:.1f} | "
            f"{c['per_request_s']:.1f} | {c['ratio']:.2f}x | "
            f"{c['ours_cpu_s']:.1f} | {c['per_request_cpu_s']:.1f} | {c['cpu_ratio']:.2f}x | "
            f"{c['max_abs_diff']:.2e} | {c['max_rel_diff']:.2e} |"
        )
    return lines + [""]


def format_speed_markdown(result: Dict[str, Any]) -> str:
    """The benchmark's tables (statistics, micro-benchmark, edit stages, target optimisers, end-to-end ratios)."""
    lines = (
        _header(result["environment"])
        + _statistics_table(result["statistics"])
        + _micro_table(result.get("statistics_micro"))
        + _edits_table(result["edits"])
        + _optimizers_table(result.get("optimizers"))
        + _comparisons_table(result["comparisons"])
    )
    return "\n".join(lines)
