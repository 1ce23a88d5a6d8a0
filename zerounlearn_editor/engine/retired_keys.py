"""Retired hyperparameters: a file that still sets one fails with the reason and what to use instead.

The numbers behind each retirement stay in ``benchmarks/notebook/`` and ``benchmarks/RESULTS.md``. The one trace a
retired experiment left in saved folders (the protection experiment's state file beside an old ledger) is named
here too, so that the ledger can ignore it.
"""
from __future__ import annotations

from typing import Any, Dict, List

__all__ = ["GRADUATED_EXPERIMENTAL_KEYS", "RETIRED_EXPERIMENTAL_KEYS", "RETIRED_KEYS", "RETIRED_STATE_FILE",
           "RETIRED_STATE_NOTE", "retired_key_errors"]

_GD_RETAIN = "ZeroUnlearn-GD with retain_nullspace_weight (hparams/ZeroUnlearn-GD/<model>-retain.yaml)"

_FORGOTTEN_PROTECTION = "forgotten_protection_weight"
_FORGOTTEN_PROTECTION_WHY = (
    "the lifelong protection of earlier edits' forget keys did not win on report data: chained `unlearn --model` "
    "runs with hparams/ZeroUnlearn-GD/<model>-many.yaml keep every earlier fact forgotten without it, and on streams "
    "it forgot the later rounds' facts less (benchmarks/RESULTS.md, 'Chained `unlearn --model` runs' and 'Scale'; "
    "benchmarks/notebook/2026-11-29-forgotten-protection-leaves.md); delete the key (to chain edits use "
    "<model>-many.yaml); the experiment lives on the branch experiment/forgotten-protection (commit bc98db8)")
RETIRED_STATE_FILE = "forgotten_state.safetensors"
"""The retired experiment's state file, which folders ``unlearn --save`` wrote before its retirement hold beside
their ledger: a continued run ignores it (with a logged note, :data:`RETIRED_STATE_NOTE`) and never hashes it as
a weight file."""
RETIRED_STATE_NOTE = (
    f"{RETIRED_STATE_FILE} and the ledger's state field (the retired forgotten-protection experiment's state of "
    "earlier forget keys; the experiment lives on the branch experiment/forgotten-protection) are ignored: this edit "
    "is the YAML's, without that protection, and the new folder holds no such file")
"""The note a continued run logs for an old folder's state of the retired protection experiment."""
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
    # the lifelong protection experiment (issue 47): left the package, set either here or under experimental:
    _FORGOTTEN_PROTECTION: _FORGOTTEN_PROTECTION_WHY,
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
    _FORGOTTEN_PROTECTION: _FORGOTTEN_PROTECTION_WHY,
    # issue 48: the residual gap split by each layer's capacity did not meet the n = 50 goals on tune data
    "layer_split": "splitting the residual gap by each layer's null-space key share times its post-MLP gain lowered "
    "Gemma-3-270m's PPL by 2-3 points but left it at +8.8% or more at n = 50 (benchmarks/RESULTS.md, section 12.9; "
    "benchmarks/notebook/2026-11-30-gemma-split.md); delete the key (the layers split the gap evenly; the code is "
    "on the branch i48-split, commit 4587f79)",
    # issue 48: the facts without target steps left out of the solves lowered PPL but lost Spe on report data
    "solve_stepped_only": "leaving the facts that take no target step out of the layers' solves lowered "
    "Gemma-3-270m's --many PPL (+17.1% -> +14.3% at n = 1,000) but lost neighbours (Spe 51% -> 41% of base; "
    "benchmarks/RESULTS.md, 12.20; benchmarks/notebook/2026-11-30-gemma-stepped-only.md); delete the key (every "
    "fact enters the solve; the code is on the branch i48-held, commit d33d868)",
    # issue 48: the paper's neutral targets on the argmax-known facts only kept more neighbours but cost PPL
    "neutral_step_rank_limit": "the paper's neutral (EOS) targets on only the facts whose answer is the model's "
    "argmax kept more neighbours than --many's answer-suppression targets (Gemma-3-270m val n = 1,000: Spe 70% / 65% "
    "-> 81% / 72% of base) but cost PPL +7.4% / +9.6% (against +1.9% / +2.2%) and left known first-token Eff "
    "2.6 / 2.1 (2 facts each), "
    "and on SmolLM2 PPL +4.1% against +0.5% (benchmarks/RESULTS.md, 12.25; "
    "benchmarks/notebook/2026-12-01-gemma-neutral-stepped.md); delete the key (--many's answer-suppression targets "
    "with suppress_rank_limit select by the same rank; the code is on the branch neutral-stepped, commit 192568c)",
}
"""Retired keys under ``experimental:``: a file that still sets one fails with this message."""


GRADUATED_EXPERIMENTAL_KEYS: Dict[str, str] = {
    # experiments that won on report data: each is now a top-level key, used by a shipped YAML
    "fewshot_contexts": "graduated to the top-level key 'fewshot_contexts' (the -deep.yaml files; "
    "benchmarks/RESULTS.md, 'Deep forgetting'): move it out of experimental:, same value",
    # issue 45: the two levers of the -robust.yaml files (benchmarks/RESULTS.md, "The robust YAML")
    "rank_below_alternatives": "graduated to the top-level key 'rank_below_alternatives' (the -robust.yaml files; "
    "benchmarks/RESULTS.md, 'Audit'): move it out of experimental:, same value",
    "quantized_forget_keys": "graduated to the top-level key 'quantized_forget_keys' of ZeroUnlearn-GD (the "
    "-robust.yaml files; benchmarks/RESULTS.md, 'Audit'): move it out of experimental:, same value (ZeroUnlearn "
    "has no such key)",
    # issue 48: the text weight by key reach, written by init-hparams where the MLP output passes a norm (Gemma-3)
    "nullspace_text_weight": "graduated to the top-level key 'nullspace_text_weight' of ZeroUnlearn-GD (what "
    "init-hparams writes behind a post-MLP norm, hparams/ZeroUnlearn-GD/gemma-3-270m-rules.yaml; "
    "benchmarks/RESULTS.md, section 12): move it out of experimental:, same value (ZeroUnlearn has no such key)",
    # issue 48: the answer-rank step selection of Gemma-3-270m's -many.yaml
    "suppress_rank_limit": "graduated to the top-level key 'suppress_rank_limit' (the <model>-many.yaml "
    "files; benchmarks/RESULTS.md, 12.18-12.19): move it out of experimental:, same value",
    # issue 48: the repair round of Gemma-3-270m's -many.yaml
    "repair_rounds": "graduated to the top-level key 'repair_rounds' of ZeroUnlearn-GD "
    "(hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml; benchmarks/RESULTS.md, 12.32): move it out of experimental:, "
    "same value (ZeroUnlearn has no such key)",
}
"""Experiments that became keys of their own: a file that still sets one under ``experimental:`` fails with this
message naming the key to use."""
