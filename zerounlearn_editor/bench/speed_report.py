"""The speed bench's markdown report (:func:`format_speed_markdown`) of :func:`~.speed_bench.run_speed`'s result."""
from __future__ import annotations

from typing import Any, Dict

__all__ = ["format_speed_markdown"]


def _mb(row: Dict[str, Any], prefix: str = "") -> str:
    return f"{row[prefix + 'peak_mb']:.0f} (+{row[prefix + 'peak_delta_mb']:.0f})"


def format_speed_markdown(result: Dict[str, Any]) -> str:
    """The benchmark's tables (statistics, micro-benchmark, edit stages, end-to-end ratios)."""
    env = result["environment"]
    kind = "CUDA allocated" if env["device"].startswith("cuda") else "RSS"
    lines = [
        f"Device `{env['device']}`{' (' + env['gpu'] + ')' if 'gpu' in env else ''}, model `{env['model']}` "
        f"({env['parameters'] / 1e6:.0f}M parameters, {env['dtype']}), torch {env['torch']}, {env['threads']} "
        "thread(s). "
        f"Memory: peak {kind} in MB (+ increase during the stage).",
        "",
    ]
    if result["statistics"]:
        lines += ["**Statistics stage** (empty cache)", "",
                  "| pipeline | corpus passes | tokens | s | CPU s | tokens/s | s per 1k tokens | peak MB |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in result["statistics"]:
            lines.append(
                f"| {r['pipeline']} | {r['corpus_passes']} | {r['tokens']} | {r['seconds']:.1f} | {r['cpu_s']:.1f} | "
                f"{r['tokens_per_s']:.0f} | {r['s_per_1k_tokens']:.3f} | {_mb(r)} |"
            )
        lines.append("")
    micro = result.get("statistics_micro")
    if micro:
        lines += [f"**Statistics micro-benchmark** ({micro['passages']} passages)", "",
                  "| mode | passes | s | CPU s | tokens/s | time / one pass for all layers (wall, CPU) | peak MB |",
                  "|---|---|---|---|---|---|---|"]
        for r in micro["rows"]:
            lines.append(
                f"| {r['mode']} | {r['passes']} | {r['seconds']:.1f} | {r['cpu_s']:.1f} | {r['tokens_per_s']:.0f} | "
                f"{r['ratio_vs_one_pass']:.2f}, {r['cpu_ratio_vs_one_pass']:.2f} | {_mb(r)} |"
            )
        lines.append("")
    if result["edits"]:
        lines += [
            "**Edit stages** (seconds; statistics precomputed)",
            "",
            "| method | pipeline | targets_optimizer | n | contexts | targets | keys | solve | write-back | edit total "
            "| edit CPU s | edit peak MB | eval (forget prompts) | eval peak MB |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in result["edits"]:
            s = r["stages_s"]
            lines.append(f"| {r['method']} | {r['pipeline']} | {r.get('targets_optimizer', '-')} | {r['n']} | "
                         f"{s['contexts']:.2f} | {s['targets']:.1f} | "
                         f"{s['keys']:.2f} | {s['solve']:.2f} | {s['write_back']:.3f} | {r['edit_s']:.1f} | "
                         f"{r['edit_cpu_s']:.1f} | {_mb(r, 'edit_')} | {r['eval_s']:.2f} | {_mb(r, 'eval_')} |")
        lines.append("")
    if result.get("optimizers"):
        lines += [
            "**Target optimisers** (ours pipeline; per-request = the reference structure with Adam)",
            "",
            "| method | n | targets_optimizer | targets s | edit s | edit CPU s | per-request / this (wall, CPU) | "
            "target NLL mean | target steps mean | forget acc |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in result["optimizers"]:
            ratio = ("-" if r["per_request_over_this"] is None
                     else f"{r['per_request_over_this']:.2f}x, {r['per_request_over_this_cpu']:.2f}x")
            lines.append(
                f"| {r['method']} | {r['n']} | {r['targets_optimizer']} | {r['targets_s']:.1f} | {r['edit_s']:.1f} | "
                f"{r['edit_cpu_s']:.1f} | {ratio} | {r['target_nll_mean']:.3f} | {r['target_steps_mean']:.1f} | "
                f"{r['eval_forget_acc']:.2f} |"
            )
        lines.append("")
    if result["comparisons"]:
        lines += [
            "**End to end** (edit with cached statistics; per-request: the paper's Adam loop)",
            "",
            "| method | n | ours (targets) | ours s | per-request s | per-request / ours | ours CPU s | per-request "
            "CPU s | CPU ratio | max abs diff of edited W | max rel diff |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in result["comparisons"]:
            lines.append(
                f"| {c['method']} | {c['n']} | {c.get('ours_targets_optimizer', 'adam')} | {c['ours_s']:.1f} | "
                f"{c['per_request_s']:.1f} | {c['ratio']:.2f}x | "
                f"{c['ours_cpu_s']:.1f} | {c['per_request_cpu_s']:.1f} | {c['cpu_ratio']:.2f}x | "
                f"{c['max_abs_diff']:.2e} | {c['max_rel_diff']:.2e} |"
            )
        lines.append("")
    return "\n".join(lines)
