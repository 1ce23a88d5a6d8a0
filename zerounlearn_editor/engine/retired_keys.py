"""Retired hyperparameters: a file that still sets one fails with the reason and what to use instead.

The numbers behind each retirement stay in ``benchmarks/notebook/`` and ``benchmarks/RESULTS.md``.
"""
from __future__ import annotations

from typing import Any, Dict, List

__all__ = ["RETIRED_EXPERIMENTAL_KEYS", "RETIRED_KEYS", "retired_key_errors"]

_GD_RETAIN = "ZeroUnlearn-GD with retain_nullspace_weight (hparams/ZeroUnlearn-GD/<model>-retain.yaml)"
RETIRED_KEYS: Dict[str, str] = {
    # key (or "key: value" for a retired value) -> why it was retired and what to use instead;
    # the numbers stay in benchmarks/notebook/
    "targets_optimizer: lbfgs": "its edits forget less at n = 50 "
                                "(benchmarks/notebook/2026-11-23-targets-optimizer-speed.md); "
    "use targets_optimizer: adam_kv (the default)",
    "target_retain_weight": "retain-aware neutral targets did not change Eff/Spe after the solve "
    f"(benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); delete the key; to keep facts use {_GD_RETAIN}",
    "target_retain_neighbours": "part of the retain-aware targets of target_retain_weight "
                                "(benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); "
    f"delete the key; to keep facts use {_GD_RETAIN}",
    "target_retain_scale": "part of the retain-aware targets of target_retain_weight "
                           "(benchmarks/notebook/2026-11-23-surgical-tuning-waves.md); "
    f"delete the key; to keep facts use {_GD_RETAIN}",
    "utility_penalty_weight": "the soft C0 penalty only traded forgetting for fluency along the null space's own front "
    "(benchmarks/notebook/2026-11-23-surgical-diagnosis-ablation.md); delete the key; use nullspace_threshold / "
    "norm_weight",
    "retain_penalty_weight": "a soft retain penalty added nothing over the hard null space "
    f"(benchmarks/notebook/2026-11-23-surgical-diagnosis-ablation.md); delete the key; use {_GD_RETAIN}",
    "projection_utility_weight": "the C0-aware projector forgot less "
                                 "(benchmarks/notebook/2026-11-23-surgical-diagnosis-ablation.md); "
    "delete the key (ZeroUnlearn uses the paper's projector)",
    "context_positions": "'subject' did not win on report data "
                         "(benchmarks/notebook/2026-11-23-surgical-tuning-waves.md) and "
    "'all' is what context_nullspace_weight protects; delete the key",
    "retain_weight": "part of ZeroUnlearn+R, which ZeroUnlearn-GD+R beats at every n measured and which breaks fluency "
    f"beyond ~50 facts (benchmarks/RESULTS.md, 'Surgical forgetting'); use {_GD_RETAIN}",
    "projection_retain_weight": "part of ZeroUnlearn+R, which ZeroUnlearn-GD+R beats at every n measured "
    f"(benchmarks/RESULTS.md, 'Surgical forgetting'); use {_GD_RETAIN}",
    # an experiment that lost on report data: the key moved under experimental:
    "forgotten_protection_weight": "the lifelong protection kept neighbours but forgot the later rounds' facts less "
    "on two streams (benchmarks/RESULTS.md, 'Lifelong protection' and 'Scale'; "
    "benchmarks/notebook/2026-11-27-scale-levers.md), so it is an experiment: move it under experimental: "
    "(ZeroUnlearn-GD: `experimental: {forgotten_protection_weight: 1.0}`), or delete it (0 = off)",
    # settings every shipped YAML held at one value (issue 27: at most 48 keys); the value is now fixed
    "context_seed": "the context prefixes are always sampled with seed 0 "
                    "(zerounlearn_editor.engine.contexts.CONTEXT_SEED, "
    "the value of every shipped YAML); delete the key",
    "mom2_batch_size": "the statistics pass always reads 16 passages per forward pass "
    "(zerounlearn_editor.engine.stats.STATS_BATCH_SIZE, the value of every shipped YAML; C0 does not depend on it); "
    "delete the key",
    "projection_eps": "ZeroUnlearn always uses the paper's exact projector P = I - V V^T (eps 0, the value of every "
                      "shipped "
    "YAML; eps > 0 made the edit full rank, so no adapter); delete the key",
    "gd_tolerance": "solver: gd always stops at a relative change of 1e-10 "
    "(zerounlearn_editor.methods.zerounlearn_gd.method.GD_TOLERANCE, the value of every shipped YAML); delete the key",
}
"""Retired hyperparameters: a file that still sets one fails with this message (see :func:`retired_key_errors`)."""


def retired_key_errors(config: Dict[str, Any], known: Any) -> List[str]:
    """One message per retired key (not in ``known``, the class's fields) or retired value in ``config``."""
    errors = []
    for key, value in config.items():
        for entry in (key, f"{key}: {value}" if isinstance(value, str) else None):
            if entry in RETIRED_KEYS and (entry != key or key not in known):
                errors.append(f"{entry!r} was retired: {RETIRED_KEYS[entry]}")
    return errors


RETIRED_EXPERIMENTAL_KEYS: Dict[str, str] = {
    # experiments of issue 37 (all-token Eff at 1,000 facts) that did not win on report data; their code is on the
    # branch i37-all-token-experiments (commit 0247767)
    "suppress_every_token": "the every-token targets took the known all-token Eff to 14-19% of base "
    "but not with Spe >= 75% and PPL <= +3% on every seed (benchmarks/RESULTS.md, 'Scale'; "
    "benchmarks/notebook/2026-11-27-all-token-levers.md); delete the key (the code is on the branch "
    "i37-all-token-experiments, commit 0247767)",
    "completion_requests": "editing at the answer's own tokens removed the completion but also the "
    "neighbours' answers (Spe 37-46%; benchmarks/notebook/2026-11-27-completion-requests.md); delete the key (the "
    "code is on the branch i37-all-token-experiments, commit 0247767)",
    "completion_neighbours": "part of completion_requests (keep rows: Spe 68-79% at 21-23% of base, "
    "over 15 minutes at 1,000 facts; benchmarks/notebook/2026-11-27-completion-requests.md); delete the key (the "
    "code is on the branch i37-all-token-experiments, commit 0247767)",
}
"""Retired keys under ``experimental:``: a file that still sets one fails with this message."""
