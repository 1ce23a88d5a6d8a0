"""Fluency guard and perplexity with and without a BOS token at the start of every window (Gemma-3).

Gemma's tokenizer puts BOS before a text's first token only, so the bench's 512-token windows after the first, and
the guard's passages from token 5000, reach the model without the BOS it was trained with (SmolLM2's tokenizer adds
none). This script redoes one batch edit (``guard_readings.batch_setup``; targets from the given folder's cache)
and, for the change scaled by each ``--scales`` value, reads: the 5000-token perplexity as the bench scores it
(512-token windows as tokenized), the same tokens with BOS put before every window (511 text tokens a window), the
guard's 8 x 128 passages as tokenized and with BOS before each. One JSON, written after every condition.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 5 python benchmarks/guard/bos_readings.py \
        --hparams hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml --n 1000 --seed 1 \
        --targets benchmarks/results/gemma/ppl_tokens/val_n1000_seed1 --out benchmarks/results/guard/gemma_bos
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Dict, List

import torch

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.engine.fluency_guard import guard_chunks, guard_perplexity
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, read_text
from zerounlearn_editor.harness.scale_setup import edit_once
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.support.files import read_json, write_json_atomic

sys.path.insert(0, str(Path(__file__).parent))
from guard_readings import DATA, batch_setup, draw_parser  # noqa: E402

LOG = logging.getLogger("bos_readings")


def layouts(tok: Any, ids: List[int], bos: int) -> Dict[str, List[List[int]]]:
    """The four token layouts read: bench windows as tokenized / with BOS, guard passages as tokenized / with BOS
    (the last: the package's guard passages, ``guard_chunks``)."""
    body = ids[1:5000] if ids[0] == bos else ids[:5000]
    bench = [ids[k:k + 512] for k in range(0, 5000, 512)]
    bench_bos = [[bos] + body[k:k + 511] for k in range(0, len(body), 511)]
    starts = range(5000, 15000, 1250)
    return {"ppl_5000": bench, "ppl_5000_bos": bench_bos, "guard_8x128": [ids[s:s + 128] for s in starts],
            "guard_8x128_bos": guard_chunks(tok, read_text(default_ppl_text()), 128)}


def main() -> None:
    parser = draw_parser(__doc__.splitlines()[0], 1, "0.5,1.0")
    parser.add_argument("--targets", required=True, help="folder whose targets/ cache holds this draw's targets")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    result_path = out / "bos_readings.json"
    result: Dict[str, Any] = read_json(result_path) if result_path.exists() else {}
    run, setup, cases = batch_setup(args.hparams, DATA[args.data], args.n, args.seed, Path(args.targets))
    model, tok, hp = setup.model, setup.tok, run.hps[0]
    ids = leading_token_ids(tok, read_text(default_ppl_text()), 15000)
    bos = tok.bos_token_id
    result.update(hparams=args.hparams, n=args.n, seed=args.seed, first_token_is_bos=ids[0] == bos)
    texts = layouts(tok, ids, bos)

    def read(label: str) -> None:
        result.setdefault("conditions", {})[label] = {k: guard_perplexity(model, tok, v) for k, v in texts.items()}
        write_json_atomic(result_path, result)
        LOG.info("%s: %s", label, result["conditions"][label])

    if "base" not in result.get("conditions", {}):
        read("base")
    requests = [dict(c.request) for c in cases]
    targets, _, _ = TargetCache(Path(args.targets) / "targets", setup.fingerprint).get(model, tok, hp, requests, 50)
    weights_copy, _, _ = edit_once(setup, hp, requests, targets)
    params = dict(model.named_parameters())
    edited = {name: params[name].detach().clone() for name in weights_copy}
    for s in (float(x) for x in args.scales.split(",")):
        if f"scale {s}" in result.get("conditions", {}):
            continue
        with torch.no_grad():
            for name, w0 in weights_copy.items():
                params[name].copy_(w0 + s * (edited[name] - w0))
        read(f"scale {s}")
    restore_weights(model, weights_copy)


if __name__ == "__main__":
    main()
