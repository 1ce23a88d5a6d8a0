"""``zerounlearn bench-scale stream``: R rounds x n facts on the same model (:func:`run_scale_stream`).

Per seed ``R * n`` cases are drawn (:func:`~zerounlearn_editor.harness.scale_cases.draw_cases`) and cut into ``R``
chunks; round ``k`` edits chunk ``k`` on the model left by rounds ``1..k-1`` (targets and keys from that model,
``C0`` of the unedited model). After every round the round-1 facts and the round's own facts are scored; every
``eval_every`` rounds and after the last one, all facts forgotten so far and the perplexity too. Each round writes
``<out>/seed_<s>/<tag>/round_<k>.json`` and the edited layers' weights (``weights_round_<k>.safetensors``; the
previous round's files are then removed); a rerun loads the newest round that has both and continues there.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
from torch import nn

from zerounlearn_editor.data.types import UnlearnCase
from zerounlearn_editor.engine.hparams import EditHyperParams
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.easyedit_format import CaseScores
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.case_scoring import score_cases
from zerounlearn_editor.harness.scale_cases import draw_cases
from zerounlearn_editor.harness.scale_config import ScaleConfig
from zerounlearn_editor.harness.scale_metrics import known_mask, scale_metrics
from zerounlearn_editor.harness.scale_report import write_stream_summary
from zerounlearn_editor.harness.scale_rows import STREAMS, stream_dir
from zerounlearn_editor.harness.scale_setup import (
    ScaleRun,
    ScaleSetup,
    edit_once,
    load_setup,
    perplexity,
    prepare_run,
    record_head,
)
from zerounlearn_editor.harness.stages import Stage
from zerounlearn_editor.support.files import read_json, write_bytes_atomic, write_json_atomic

__all__ = ["run_scale_stream"]

LOG = logging.getLogger(__name__)


def _weights_path(folder: Path, k: int) -> Path:
    return folder / f"weights_round_{k}.safetensors"


def _resume_point(folder: Path) -> int:
    """The newest round with its JSON and its weights file (0 = start from the unedited model)."""
    done = [int(p.stem.split("_")[1]) for p in folder.glob("round_*.json")]
    return max([k for k in done if _weights_path(folder, k).exists()], default=0)


def _check_stored_stream(folder: Path, start: int, rounds: int, n: int, cases: Sequence[UnlearnCase]) -> None:
    """A stream resumed after round ``start`` must have been made with ``n`` facts per round and the same first
    ``min(start, rounds) * n`` cases (else other data, seed or n)."""
    if start and (folder / "stream.json").exists():
        meta = read_json(folder / "stream.json")
        upto = min(start, rounds) * n
        if meta.get("n") != n or meta.get("case_ids", [])[:upto] != [c.case_id for c in cases[:upto]]:
            raise BenchConfigError(
                f"bench-scale: {folder} holds a stream of other facts (other data, seed or n); "
                "use another --out or remove it"
            )


@dataclass
class _Stream:
    """One stream being run: its cases, the unedited model's scores of the first ones (``pre``, ``known``) and the
    original value of every parameter an edit of the stream has changed (``originals``)."""

    config: ScaleConfig
    setup: ScaleSetup
    seed: int
    cases: List[UnlearnCase]
    originals: Dict[str, torch.Tensor] = field(default_factory=dict)
    pre: List[CaseScores] = field(default_factory=list)
    known: List[bool] = field(default_factory=list)

    def ensure_pre(self, upto: int) -> None:
        """Unedited scores of ``cases[:upto]``, scored on the original weights swapped in for the while."""
        if len(self.pre) >= upto:
            return
        model = self.setup.model
        params = dict(model.named_parameters())
        edited = {name: params[name].detach().clone() for name in self.originals}
        restore_weights(model, self.originals)
        try:
            with Stage(f"seed {self.seed}: scoring the unedited model on cases {len(self.pre) + 1}-{upto}"):
                new = score_cases(model, self.setup.tok, self.cases[len(self.pre):upto], self.config.eval_batch_size)
        finally:
            restore_weights(model, edited)
        self.pre.extend(new)
        self.known.extend(known_mask(new, self.config.known_min_accuracy))

    def load_weights(self, saved: Mapping[str, torch.Tensor]) -> None:
        """Write a stored round's weights into the model, keeping each parameter's original value."""
        params = dict(self.setup.model.named_parameters())
        with torch.no_grad():
            for name, value in saved.items():
                self.originals[name] = params[name].detach().clone()
                params[name].copy_(value)

    def edited_weights(self) -> Dict[str, torch.Tensor]:
        """The current value (CPU, contiguous) of every parameter the stream has edited."""
        params = dict(self.setup.model.named_parameters())
        return {name: params[name].detach().cpu().contiguous() for name in self.originals}


def _stream_round(stream: _Stream, hp: EditHyperParams, tag: str, k: int) -> Dict[str, Any]:
    """Round ``k``: edit its chunk on the model the earlier rounds left, then score the round-1 facts and the round's
    own (every round) or every fact so far and the perplexity (every ``eval_every`` rounds and after the last)."""
    config, setup, seed = stream.config, stream.setup, stream.seed
    n, rounds = config.ns[0], config.rounds
    chunk = stream.cases[(k - 1) * n: k * n]
    requests = [dict(c.request) for c in chunk]
    with Stage(f"seed {seed}: {tag} round {k}/{rounds}") as stage:
        weights_copy, details, cost = edit_once(setup, hp, requests, None)
    for name, value in weights_copy.items():
        stream.originals.setdefault(name, value)
    with Stage(f"seed {seed}: {tag} round {k} evaluation") as evaluation:
        done = k * n
        stream.ensure_pre(done)
        pre, known = stream.pre, stream.known
        full = k % config.eval_every == 0 or k == rounds
        scored = stream.cases[:done] if full else stream.cases[:n] + (chunk if k > 1 else [])
        post = score_cases(setup.model, setup.tok, scored, config.eval_batch_size)
        record: Dict[str, Any] = {
            "round": k,
            "forgotten": done,
            "edit_seconds": stage.seconds,
            "stages_seconds": details.pop("timings"),
            "edit_cost": cost.as_dict(),
            "details": details,
            "round1": scale_metrics(post[:n], pre[:n], known[:n]),
            "this_round": scale_metrics(post[-n:], pre[(k - 1) * n : done], known[(k - 1) * n : done]),
        }
        if full:
            record["all"] = dict(scale_metrics(post, pre[:done], known[:done]), ppl=perplexity(setup))
            record["all_base"] = dict(scale_metrics(pre[:done], pre[:done], known[:done]), ppl=setup.base_ppl)
    record["eval_seconds"] = evaluation.seconds
    return record


def _save_round(stream: _Stream, folder: Path, k: int, record: Dict[str, Any]) -> None:
    """Round ``k``'s edited weights, then its JSON; the previous round's weights file is removed."""
    from safetensors.torch import save

    write_bytes_atomic(_weights_path(folder, k), save(stream.edited_weights(), metadata={"round": str(k)}))
    write_json_atomic(folder / f"round_{k}.json", record)
    old = _weights_path(folder, k - 1)
    if k > 1 and old.exists():
        old.unlink()


def _log_round(seed: int, tag: str, k: int, record: Mapping[str, Any]) -> None:
    full = "all" in record
    LOG.info(
        "seed %d %s round %d: round-1 Eff %.1f (first %.1f)%s",
        seed,
        tag,
        k,
        record["round1"]["eff"],
        record["round1"]["eff_first"],
        f"; all: Eff {record['all']['eff']:.1f} Spe {record['all']['spe']:.1f} PPL "
        f"{record['all']['ppl']}"
        if full
        else "",
    )


def _run_stream(
    config: ScaleConfig, run: ScaleRun, setup: ScaleSetup, seed: int, hp: EditHyperParams, tag: str, start: int,
    cases: List[UnlearnCase], dropped: Any,
) -> None:
    """Rounds ``start + 1 .. rounds`` of one stream (``start`` > 0: resumed from its stored round); the model is
    restored (checked bit-identical) at the end."""
    from safetensors.torch import load_file

    folder, n, rounds = stream_dir(Path(config.out), seed, tag), config.ns[0], config.rounds
    if setup.base_ppl is None:
        setup.base_ppl = perplexity(setup)
    setup.fingerprint.verify(setup.model, f"seed {seed}: before the {tag} stream")
    stream = _Stream(config, setup, seed, cases)
    stream.ensure_pre(max(start, 1) * n)
    saved = load_file(str(_weights_path(folder, start))) if start else {}
    if not start or read_json(folder / "stream.json").get("rounds") != rounds:
        write_json_atomic(folder / "stream.json", dict(
            record_head(config, run, setup, tag), seed=seed, n=n, rounds=rounds,
            case_ids=[c.case_id for c in cases], neighbours_dropped=dropped, base_ppl=setup.base_ppl,
            base_round1=scale_metrics(stream.pre[:n], stream.pre[:n], stream.known[:n])))
    try:
        stream.load_weights(saved)
        if start:
            LOG.info("seed %d %s: resuming after round %d", seed, tag, start)
        for k in range(start + 1, rounds + 1):
            record = _stream_round(stream, hp, tag, k)
            _save_round(stream, folder, k, record)
            _log_round(seed, tag, k, record)
    finally:
        restore_weights(setup.model, stream.originals)
    setup.fingerprint.verify(setup.model, f"seed {seed}: after restoring the {tag} stream")


def run_scale_stream(config: ScaleConfig, model: Optional[nn.Module] = None, tok: Any = None) -> Dict[str, Any]:
    """Run (or resume) ``config.rounds`` rounds of ``config.ns[0]`` facts for every seed and YAML.

    A stream resumes only when made with this run's settings
    (:func:`~zerounlearn_editor.harness.scale_rows.run_settings`, the YAML's content hash); the other streams of
    ``out`` (one summary) must share the run's settings too."""
    if len(config.ns) != 1:
        raise BenchConfigError(f"bench-scale stream: one --n (facts per round), got {config.ns}")
    run = prepare_run(config, STREAMS)
    out, n, rounds = Path(config.out), config.ns[0], config.rounds
    setup: Optional[ScaleSetup] = None

    def need() -> ScaleSetup:
        nonlocal setup
        setup = setup or load_setup(config, run.hps, model, tok, STREAMS)
        return setup
    for seed in config.seeds:
        for hp, tag in zip(run.hps, run.tags):
            start = _resume_point(stream_dir(out, seed, tag))
            cases, dropped = draw_cases(config, run, rounds * n, seed, need)
            _check_stored_stream(stream_dir(out, seed, tag), start, rounds, n, cases)
            if start >= rounds:
                continue
            _run_stream(config, run, need(), seed, hp, tag, start, cases, dropped)
    return write_stream_summary(out)
