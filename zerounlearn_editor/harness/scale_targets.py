"""The neutral targets of a batch scale run, optimised once per seed on the unedited model and cached on disk
(:class:`TargetCache`)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.hparams import EditHyperParams
from zerounlearn_editor.engine.pipeline import neutral_targets, target_settings
from zerounlearn_editor.engine.targets import NeutralTargets
from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.harness.scale_cost import measure
from zerounlearn_editor.support.files import sha256_of_json, write_bytes_atomic

__all__ = ["TargetCache"]

LOG = logging.getLogger(__name__)


class TargetCache:
    """Neutral targets of the unedited model, per chunk of requests, as safetensors files.

    A chunk's file is named by the SHA-256 of its requests, the target settings
    (:func:`~zerounlearn_editor.engine.pipeline.target_settings`) and the model's fingerprint;
    it holds ``z``, ``h0`` ``[k, d_model]``, ``nll`` ``[k]``, ``steps`` ``[k]`` and the seconds its
    optimisation took (metadata ``seconds``).
    """

    def __init__(self, folder: Path, fingerprint: ModelFingerprint):
        self.folder = Path(folder)
        self.model_key = sha256_of_json(fingerprint.digests)
        self.last_cpu_seconds = 0.0

    def path(self, model: nn.Module, hp: EditHyperParams, requests: Sequence[Mapping[str, Any]]) -> Path:
        key = sha256_of_json(
            {"requests": list(requests), "settings": target_settings(model, hp), "model": self.model_key}
        )
        return self.folder / f"targets_{key[:24]}.safetensors"

    def get(self, model: nn.Module, tok: Any, hp: EditHyperParams, requests: List[Dict[str, Any]],
            chunk: int) -> Tuple[NeutralTargets, float, List[Dict[str, float]]]:
        """Targets of ``requests`` (loaded or optimised chunk by chunk), their total optimisation seconds and
        the cost of each chunk optimised in this call."""
        from safetensors.torch import load_file, save

        parts, seconds, costs = [], 0.0, []
        self.last_cpu_seconds = 0.0  # the process CPU seconds of these targets (nan for files written without it)
        for start in range(0, len(requests), chunk):
            part = requests[start:start + chunk]
            path = self.path(model, hp, part)
            if path.exists():
                from safetensors import safe_open

                with safe_open(str(path), "pt") as handle:
                    meta = handle.metadata() or {}
                tensors = load_file(str(path))
                took = float(meta.get("seconds", "nan"))
                cpu = float(meta.get("cpu_seconds", "nan"))
            else:
                with measure(trace_python=False) as cost:  # tracemalloc would slow the optimisation loop
                    t = neutral_targets(model, tok, part, hp)
                took, cpu = cost.seconds, cost.cpu_seconds
                costs.append(dict(cost.as_dict(), facts=len(part)))
                tensors = {
                    "z": t.z.detach().cpu().contiguous(),
                    "h0": t.h0.detach().cpu().contiguous(),
                    "nll": t.nll.detach().cpu().contiguous(),
                    "steps": torch.tensor(list(t.steps_run), dtype=torch.long),
                }
                write_bytes_atomic(path, save(tensors, metadata={"seconds": repr(took), "cpu_seconds": repr(cpu)}))
                LOG.info("targets %d-%d of %d: %.1fs", start + 1, start + len(part), len(requests), took)
            parts.append(tensors)
            seconds += took
            self.last_cpu_seconds += cpu
        targets = NeutralTargets(
            z=torch.cat([p["z"] for p in parts]), h0=torch.cat([p["h0"] for p in parts]),
            nll=torch.cat([p["nll"] for p in parts]), steps_run=[int(s) for p in parts for s in p["steps"].tolist()])
        return targets, seconds, costs
