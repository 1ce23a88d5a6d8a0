"""Fluency guard: which guard text tracks an edit's perplexity cost on the 5000-token WikiText-2 perplexity?

One batch edit (``bench-scale``'s draw, targets cache and edit; any YAML, any model), then the change scaled
(``W + s dW``) for each ``--scales`` value. Per condition: the perplexity on the first 5000 tokens of the package's
WikiText-2 text (512-token windows, the bench's) and the readings of candidate guard texts (each chunk one
window, :func:`guard_texts`; the chunks from token 5000 on are text the 5000-token perplexity does not
score). One JSON, written after every condition (a rerun skips stored
ones); ``guard_table.py`` tabulates such JSONs.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 5 python benchmarks/guard/guard_readings.py \
        --hparams hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml --n 200 --seed 2 \
        --out benchmarks/results/guard/smollm2_paper_val_seed2_n200
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import torch

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.fluency_guard import guard_perplexity
from zerounlearn_editor.engine.pipeline import restore_weights
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, perplexity_of_ids, read_text
from zerounlearn_editor.harness.scale_cases import draw_cases
from zerounlearn_editor.harness.scale_config import ScaleConfig
from zerounlearn_editor.harness.scale_rows import BATCH_ROWS
from zerounlearn_editor.harness.scale_setup import edit_once, load_setup, prepare_run
from zerounlearn_editor.harness.scale_targets import TargetCache
from zerounlearn_editor.support.files import read_json, write_json_atomic

LOG = logging.getLogger("guard_readings")
DATA = {"val": "../shared/data/counterfact/counterfact_easyedit_val_1919.json",
        "train": "../shared/data/counterfact/counterfact_easyedit_train_9484.json"}


def guard_texts(ids: Sequence[int]) -> Dict[str, List[List[int]]]:
    """Candidate guard texts, each a list of token chunks scored in a window of their own: the shipped guard's
    first 256 tokens, the first 1024, and ``k`` chunks of ``w`` tokens spread over tokens 5000-15000."""
    texts = {"first_256 (shipped guard)": [list(ids[:256])], "first_1024": [list(ids[k * 256:(k + 1) * 256])
                                                                             for k in range(4)]}
    for k, w in ((4, 64), (8, 64), (16, 64), (8, 128), (4, 256), (8, 256)):
        texts[f"{k}x{w}_from_5000"] = [list(ids[s:s + w]) for s in range(5000, 15000, 10000 // k)]
    return texts


def readings(model: torch.nn.Module, tok: Any, guards: Dict[str, List[List[int]]],
             ppl_ids: List[int]) -> Dict[str, Any]:
    """The 5000-token perplexity and every candidate guard text's perplexity of ``model`` as it is."""
    with eval_mode(model), torch.no_grad():
        # the windows as tokenized, as the bench read them when 12.22 was measured (its JSON); the bench's
        # windows now open with BOS where the tokenizer opens the text with it (Gemma; SmolLM2 reads alike)
        ppl = perplexity_of_ids(model, tok, ppl_ids, 512, 512, 4, bos_windows=False)
    return {"ppl_5000": ppl, "guards": {k: guard_perplexity(model, tok, v) for k, v in guards.items()}}


def batch_setup(hparams: str, data_file: str, n: int, seed: int, out: Path) -> Tuple[Any, Any, List[Any]]:
    """``bench-scale batch``'s run, setup (model loaded) and case draw for one row: ``(run, setup, cases)``."""
    config = ScaleConfig(hparams=[hparams], data=data_file, seeds=[seed], out=str(out), ns=[n], ppl_tokens=5000,
                         target_chunk=50)
    run = prepare_run(config, BATCH_ROWS)
    setup = load_setup(config, run.hps, None, None, BATCH_ROWS)
    cases, _ = draw_cases(config, run, n, seed, lambda: setup)
    return run, setup, cases


def draw_parser(description: str, seed: int, scales: str) -> argparse.ArgumentParser:
    """The options of a script that redoes one batch edit and reads it at several scales (``--out`` added last)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--hparams", required=True)
    parser.add_argument("--data", choices=sorted(DATA), default="val")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--scales", default=scales)
    return parser


def main() -> None:
    parser = draw_parser(__doc__.splitlines()[0], 2, "0.25,0.5,0.75,1.0")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    result_path = out / "guard_readings.json"
    result: Dict[str, Any] = read_json(result_path) if result_path.exists() else {}
    run, setup, cases = batch_setup(args.hparams, DATA[args.data], args.n, args.seed, out)
    model, tok, hp = setup.model, setup.tok, run.hps[0]
    result.update(hparams=args.hparams, data=args.data, n=args.n, seed=args.seed,
                  case_ids=[c.case_id for c in cases])
    ids = leading_token_ids(tok, read_text(default_ppl_text()), 15000)
    guards = guard_texts(ids)
    if "base" not in result:
        result["base"] = readings(model, tok, guards, ids[:5000])
        write_json_atomic(result_path, result)
    requests = [dict(c.request) for c in cases]
    targets, _, _ = TargetCache(out / "targets", setup.fingerprint).get(model, tok, hp, requests, 50)
    weights_copy, _, _ = edit_once(setup, hp, requests, targets)
    params = dict(model.named_parameters())
    edited = {name: params[name].detach().clone() for name in weights_copy}
    for s in (float(x) for x in args.scales.split(",")):
        label = f"scale {s}"
        if label in result.get("conditions", {}):
            continue
        with torch.no_grad():
            for name, w0 in weights_copy.items():
                params[name].copy_(w0 + s * (edited[name] - w0))
        result.setdefault("conditions", {})[label] = readings(model, tok, guards, ids[:5000])
        write_json_atomic(result_path, result)
        LOG.info("%s: %s", label, result["conditions"][label])
    restore_weights(model, weights_copy)


if __name__ == "__main__":
    main()
