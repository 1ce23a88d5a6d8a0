"""Measure a model's :class:`~zerounlearn_editor.methods.zerounlearn_gd.scale_rules.ModelScales` at given layers
(what ``init-hparams`` reads for its setting rules) and the settings the rules give; JSON out.

    python benchmarks/gemma_rules/scales.py --model ~/.cache/zerounlearn_editor/models/SmolLM2-135M-Instruct \\
        --layers 16,17,18 --out benchmarks/results/gemma/rules/scales_smollm2_16-18.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from zerounlearn_editor.harness.model_scales import measure_scales
from zerounlearn_editor.methods.zerounlearn_gd.scale_rules import rule_settings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--layers", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    path = os.path.expanduser(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    layers = [int(x) for x in args.layers.split(",")]
    start = time.perf_counter()
    scales = measure_scales(model, tok, layers, "model.layers.{}", "model.layers.{}.mlp.down_proj")
    row = dict(model=args.model, layers=layers, seconds=time.perf_counter() - start,
               scales=dataclasses.asdict(scales), c0_median=scales.c0_median)
    try:
        row["rule_settings"] = rule_settings(scales)
    except ValueError as exc:  # before the reference is calibrated
        row["rule_settings"] = str(exc)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
