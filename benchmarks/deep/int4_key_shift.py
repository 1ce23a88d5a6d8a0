"""How far rounding the layers before the edit moves the forgotten keys, and what the edit does on the moved keys
(issue 45 item 1, RESULTS §7 "Why rm-r8 lets int4 per channel back").

For a cached edit (``diagnose_forgotten.py``'s ``OUT/edits/NAME.safetensors``) of the facts of ``--half`` /
``--n`` / ``--seed``: the edited model, and a copy whose linear weights in the layers before the first edited one
are RTN-rounded (``--scheme``); per edited down-projection, over the forgotten keys ``k`` (its input at the
subject's last token) and ``k'`` (on the rounded copy): median ``||k' - k|| / ||k||``, median
``||dW k'|| / ||dW k||`` and median cosine of ``dW k`` and ``dW k'``. Writes ``OUT/key_shift_NAME.json``.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data python benchmarks/deep/int4_key_shift.py \\
        benchmarks/results/audit/diagnosis_int4_report rm-r8 --half report --n 40 --seed 1 --scheme int4
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES, quantized_copy
from zerounlearn_editor.harness.forgotten_diagnosis import layer_of
from zerounlearn_editor.harness.forgotten_edits import applied
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_variants import half_of  # noqa: E402
from known_cases import cached_known_selection  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("name")
    ap.add_argument("--half", default="report")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scheme", default="int4", choices=sorted(QUANT_SCHEMES))
    ap.add_argument("--known-cache", default="benchmarks/results/deep/known_counterfact_easyedit.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    out = Path(args.out)
    edit = load_file(str(out / "edits" / f"{args.name}.safetensors"))
    model, tok = load_model_and_tokenizer("smollm2")
    model.eval()
    all_cases = load_cases("counterfact-easyedit")
    known = half_of(cached_known_selection(Path(args.known_cache)), args.half)(model, tok, all_cases, None)
    forget = normalize_requests([dict(c.request) for c in sample_cases(known, args.n, args.seed)])
    params = dict(model.named_parameters())
    original = {n: params[n].detach().clone() for n in edit}
    first = min(layer_of(n) for n in edit)
    result = {"name": args.name, "scheme": args.scheme, "rounded_layers": f"0-{first - 1}", "weights": {}}
    with applied(model, edit):
        twin = quantized_copy(model, QUANT_SCHEMES[args.scheme])
        twin_params = dict(twin.named_parameters())
        keep = {n: params[n] for n in twin_params if ".layers." in n and layer_of(n) >= first}
        with torch.no_grad():
            for n, value in keep.items():
                twin_params[n].copy_(value)
        for name in sorted(edit, key=layer_of):
            module = name.rsplit(".", 1)[0]
            k = read_keys_and_hidden(model, tok, forget, [""], module, module, "subject_last", 64).keys.double()
            k2 = read_keys_and_hidden(twin, tok, forget, [""], module, module, "subject_last", 64).keys.double()
            dw = edit[name].double() - original[name].double()
            e, e2 = dw @ k, dw @ k2  # [d_out, n]
            result["weights"][name] = {
                "median_key_shift": statistics.median(((k2 - k).norm(dim=0) / k.norm(dim=0)).tolist()),
                "median_effect_ratio": statistics.median((e2.norm(dim=0) / e.norm(dim=0)).tolist()),
                "median_effect_cosine": statistics.median(torch.nn.functional.cosine_similarity(e, e2, dim=0).tolist()),
            }
            logging.info("%s: %s", name, result["weights"][name])
    (out / f"key_shift_{args.name}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
