"""Issue 48: do the keys WikiText-2's perplexity reads at long positions lie where C0 sees no text?

C0 (``mom2_max_length: 128``) is collected on passages cut at 128 tokens; the 5000-token perplexity reads windows of
512. Per edited layer of ``gemma-3-270m-many.yaml`` and per position bin of the 512-token windows, this prints the
share of the keys' energy ``||U0^T k||^2 / ||k||^2`` in the null space the edit may write (eigenvalues of C0 below
``nullspace_threshold``), and the statistics corpus' passage lengths in tokens. No edit; the unedited model only.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/results/gemma/key_positions/key_positions.py [--model M]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
from pathlib import Path

import torch

from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.data.corpus import load_corpus
from zerounlearn_editor.engine.eval_mode import eval_mode
from zerounlearn_editor.engine.stats.cache import load_second_moment, stats_path
from zerounlearn_editor.evaluation.perplexity import leading_token_ids, plan_windows, read_text
from zerounlearn_editor.methods.zerounlearn_gd.config import ZeroUnlearnGDHyperParams
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_with_eigenvalues
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_access import StopForward, capture_inputs
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("key_positions")
BINS = (0, 64, 128, 256, 384, 512)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams", default="hparams/ZeroUnlearn-GD/gemma-3-270m-many.yaml")
    parser.add_argument("--stats-model", default="gemma-3-270m", help="the model's folder under stats_dir")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "key_positions_gemma.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    hp = ZeroUnlearnGDHyperParams.from_hparams(args.hparams)
    model, tok = load_model_and_tokenizer(hp.model_name)
    names = [hp.rewrite_module_tmp.format(layer) for layer in hp.layers]
    U0s = {}
    for layer, name in zip(hp.layers, names):
        path = stats_path(hp.stats_dir, args.stats_model, hp.mom2_dataset,
                          name, hp.mom2_dtype, hp.mom2_n_samples)
        stat, _ = load_second_moment(path)
        U0, _ = nullspace_with_eigenvalues(stat.moment(), hp.nullspace_threshold)
        U0s[layer] = U0
        LOG.info("layer %d: null rank %d of %d", layer, U0.shape[1], U0.shape[0])
    ids = leading_token_ids(tok, read_text(default_ppl_text()), args.tokens)
    energy = {layer: torch.zeros(len(BINS) - 1, dtype=torch.float64) for layer in hp.layers}
    null = {layer: torch.zeros(len(BINS) - 1, dtype=torch.float64) for layer in hp.layers}
    counts = torch.zeros(len(BINS) - 1, dtype=torch.float64)
    with eval_mode(model), torch.no_grad():
        for w in plan_windows(len(ids), 512, 512):
            x = torch.tensor([ids[w.begin:w.end]])
            with capture_inputs(model, names, stop_after=names[-1]) as inputs, contextlib.suppress(StopForward):
                model(input_ids=x)
            pos = torch.arange(x.shape[1])
            for b in range(len(BINS) - 1):
                sel = (pos >= BINS[b]) & (pos < BINS[b + 1])
                counts[b] += int(sel.sum())
                for layer, name in zip(hp.layers, names):
                    k = inputs[name][0][sel].double()  # [n, d_in]
                    energy[layer][b] += float(k.square().sum())
                    null[layer][b] += float((k @ U0s[layer]).square().sum())
    corpus = load_corpus(hp.mom2_dataset, limit=hp.mom2_n_samples)
    lengths = sorted(len(tok(t)["input_ids"]) for t in corpus.texts)
    result = {
        "hparams": args.hparams, "tokens": len(ids), "bins": BINS, "tokens_per_bin": counts.tolist(),
        "null_share": {str(layer): (null[layer] / energy[layer]).tolist() for layer in hp.layers},
        "mean_key_norm_sq": {str(layer): (energy[layer] / counts).tolist() for layer in hp.layers},
        "corpus_passage_tokens": {"n": len(lengths), "median": lengths[len(lengths) // 2],
                                  "share_over_128": sum(n > 128 for n in lengths) / len(lengths),
                                  "max": lengths[-1]},
    }
    write_json_atomic(args.out, result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
