"""The quantities of the ``v_lr`` rules (``scale_rules``) on both real models, as ``init-hparams --measure`` reads
them: SmolLM2-135M-Instruct at its shipped layers 16-18 (the reference) and Gemma-3-270m at its ``--many`` layers 2-5.
Writes ``scales.json`` beside this file.

Run from the repository root: python benchmarks/results/gemma/target_size/measure_scales.py
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from zerounlearn_editor.harness.model_scales import measure_scales
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

MODELS = (("smollm2", [16, 17, 18]), ("gemma3-270m", [2, 3, 4, 5]))


def main() -> None:
    torch.set_num_threads(1)
    out = {}
    for name, layers in MODELS:
        model, tok = load_model_and_tokenizer(name)[:2]
        scales = measure_scales(model, tok, layers, "model.layers.{}", "model.layers.{}.mlp.down_proj")
        row = dataclasses.asdict(scales)
        row["rms_over_median"] = scales.residual_rms / scales.residual_median_abs
        out[name] = {"layers": layers, **row}
    path = Path(__file__).resolve().parent / "scales.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
