"""The fluency guard's figures on SmolLM2-135M-Instruct: the ten capitals of ``facts.CAPITALS_TO_FORGET``
edited with the shipped ZeroUnlearn and ZeroUnlearn-GD YAMLs (default guard), weights restored in between.

    OMP_NUM_THREADS=1 python benchmarks/fluency_guard_smollm2.py

Prints ``EditReport.fluency`` per method and the seconds the guard's two perplexity passes took.
"""
from __future__ import annotations

import time

import torch

from zerounlearn_editor import (
    ZeroUnlearnGDHyperParams,
    ZeroUnlearnHyperParams,
    apply_zerounlearn_gd_to_model,
    apply_zerounlearn_to_model,
    restore_weights,
)
from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, fact_requests
from zerounlearn_editor.engine.pipeline import EditReport
from zerounlearn_editor.support.model_zoo import default_cache_dir, load_model_and_tokenizer
from zerounlearn_editor.support.resources import hparams_path


def main() -> None:
    torch.set_num_threads(1)
    model, tok = load_model_and_tokenizer("smollm2")
    methods = (("ZeroUnlearn", ZeroUnlearnHyperParams, apply_zerounlearn_to_model),
               ("ZeroUnlearn-GD", ZeroUnlearnGDHyperParams, apply_zerounlearn_gd_to_model))
    for name, cls, apply in methods:
        hp = cls.from_hparams(hparams_path(name, "SmolLM2-135M-Instruct")).replace(
            stats_dir=str(default_cache_dir() / "stats")
        )
        report = EditReport()
        start = time.perf_counter()
        model, weights = apply(model, tok, fact_requests(CAPITALS_TO_FORGET), hp, return_orig_weights=True,
                               progress=False, report=report)
        seconds = time.perf_counter() - start
        restore_weights(model, weights)
        print(name, report.fluency, f"guard {report.timings.get('fluency', 0.0):.1f} s of the edit's {seconds:.1f} s")


if __name__ == "__main__":
    main()
