"""Fill bench-scale batch's target cache for the first N drawn cases, chunks from the last to the first, so that a
bench-scale process walking them forwards finds the later ones done (the same files, keys and contents
``TargetCache`` writes). Used for RESULTS.md section 12.4.

Usage: python prefill_targets.py HPARAMS DATA OUT TOTAL N SEED  (TOTAL: the bench's largest --n; N: cases to fill)
"""
import logging
import sys
from pathlib import Path

from zerounlearn_editor.harness.model_fingerprint import ModelFingerprint
from zerounlearn_editor.harness.scale_batch import BATCH_ROWS
from zerounlearn_editor.harness.scale_cases import draw_cases
from zerounlearn_editor.harness.scale_config import ScaleConfig
from zerounlearn_editor.harness.scale_setup import prepare_run
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

CHUNK = 50  # the bench's --target-chunk

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
hparams, data, out = sys.argv[1:4]
total, n, seed = (int(x) for x in sys.argv[4:7])
config = ScaleConfig(hparams=[hparams], data=data, data_path=None, seeds=[seed], out=out, ns=[total], ppl_tokens=5000)
run = prepare_run(config, BATCH_ROWS)
cases, _ = draw_cases(config, run, total, seed, lambda: None)
hp = run.hps[0]
model, tok = load_model_and_tokenizer(str(hp.model_name), "cpu")
cache = TargetCache(Path(out) / "targets", ModelFingerprint.of(model))
requests = [dict(c.request) for c in cases[:n]]
probe = cache.path(model, hp, [dict(c.request) for c in cases[:10]])
assert probe.exists(), f"key mismatch: {probe} absent"  # the bench's n = 10 chunk, written before
logging.info("key check: %s exists", probe.name)
for start in reversed(range(0, n, CHUNK)):
    part = requests[start:start + CHUNK]
    if cache.path(model, hp, part).exists():
        logging.info("chunk %d-%d cached", start + 1, start + len(part))
        continue
    cache.get(model, tok, hp, part, CHUNK)
    logging.info("chunk %d-%d done (cpu %.0f s)", start + 1, start + len(part), cache.last_cpu_seconds)
