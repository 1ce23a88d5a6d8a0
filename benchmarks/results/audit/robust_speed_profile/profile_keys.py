"""Profile the robust YAML's keys stage on a small edit (issue 45): N forget CounterFact cases, the next R cases'
prompts as the retain set, targets cut to 2 steps (the keys stage does not depend on their values). Writes
OUT.prof / OUT.txt (cProfile), OUT_timings.json (the edit's stages) and OUT_weights.json (sha256 of each edited
down_proj weight's float32 bytes, :func:`weight_digests`).
``plain`` as a 4th argument: the keys stage wrapped as a stage of its own, so every read is a full forward pass
(no prefix replay, every hidden state): the reference the fast reads must equal bit for bit.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/results/audit/robust_speed_profile/profile_keys.py OUT N R [plain]
"""
import cProfile
import hashlib
import json
import logging
import pstats
import sys

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.pipeline import EditReport, EditStages
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.method import apply_zerounlearn_gd_to_model
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

logging.basicConfig(level=logging.WARNING)
out, n, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plain = len(sys.argv) > 4 and sys.argv[4] == "plain"


def plain_keys(*args, **kwargs):
    """The built-in keys stage under another name: the edit reads in full forward passes."""
    return read_keys_and_hidden(*args, **kwargs)


stages = EditStages(keys=plain_keys) if plain else EditStages()


def weight_digests(weights):
    """``{layer: sha256 of the weight's bytes}`` (equal digests: bit-identical weights)."""
    return {str(layer): hashlib.sha256(w.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
            for layer, w in weights.items()}


hp = ZeroUnlearnGDHyperParams.from_hparams("hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-robust.yaml")
hp.v_num_grad_steps = 2
model, tok = load_model_and_tokenizer("/root/.cache/zerounlearn_editor/models/SmolLM2-135M-Instruct")
cases = load_cases("counterfact-easyedit")
forget = [c.request for c in cases[:n]]
retain = [{"prompt": c.request["prompt"], "subject": c.request["subject"], "ground_truth": c.request["ground_truth"]}
          for c in cases[n:n + r]]
report = EditReport()
prof = cProfile.Profile()
prof.enable()
apply_zerounlearn_gd_to_model(model, tok, forget, hp, retain=retain, report=report, progress=False,
                              fluency_guard="off", stages=stages)
prof.disable()
prof.dump_stats(out + ".prof")
with open(out + ".txt", "w") as f:
    pstats.Stats(out + ".prof", stream=f).sort_stats("cumulative").print_stats(60)
    pstats.Stats(out + ".prof", stream=f).sort_stats("tottime").print_stats(30)
json.dump(report.timings, open(out + "_timings.json", "w"), indent=1)
json.dump(weight_digests({layer: model.model.layers[layer].mlp.down_proj.weight for layer in hp.layers}),
          open(out + "_weights.json", "w"), indent=1)
