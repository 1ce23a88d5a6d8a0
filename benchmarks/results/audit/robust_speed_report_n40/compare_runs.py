"""Whether two bench ``seed_*.json`` files agree on everything but wall times (exit 1 if not): every metric,
per-request score, target loss, layer change, guard figure, config and case list, compared as stored (exact float
equality). Wall times are the keys ``time``, ``eval_seconds``, ``edit_seconds`` and ``timings``.

    python benchmarks/results/audit/robust_speed_report_n40/compare_runs.py OLD.json NEW.json
"""
import json
import sys
from typing import Any, Iterator

TIME_KEYS = {"time", "eval_seconds", "edit_seconds", "timings"}


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """The paths where ``a`` and ``b`` differ (dict keys in ``TIME_KEYS`` skipped)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key in TIME_KEYS:
                continue
            if key not in a or key not in b:
                yield f"{path}/{key}: only in {'new' if key in b else 'old'}"
            else:
                yield from differences(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} against {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: {a!r} against {b!r}"


old, new = (json.load(open(path)) for path in sys.argv[1:3])
found = list(differences(old, new))
for line in found[:50]:
    sys.stdout.write(line + "\n")
for name in new.get("methods", {}):
    metrics = (old["methods"][name].get("metrics") or {}, new["methods"][name].get("metrics") or {})
    sys.stdout.write(f"{name}: edit s {metrics[0].get('edit_seconds')} -> {metrics[1].get('edit_seconds')}\n")
sys.stdout.write(f"{len(found)} difference(s) besides wall times\n")
sys.exit(1 if found else 0)
