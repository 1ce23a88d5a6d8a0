"""Do neutral-target residuals exist that silence a forget prompt but not its siblings?

For each of the demo's five capitals to forget, optimise a residual ``delta`` at the output of the
last edited layer (18) at the subject's last token of the bare prompt so the model says EOS next
(Adam, the clamp of the shipped YAML), with or without a transfer penalty: ``beta`` x the mean drop
of the true answer's log-probability on five *other* capitals (Greece ... Canada, the penalty's
proxies) when ``0.5 * delta`` is added at their subject token. Then add ``alpha * delta`` to five
*unseen* capitals (the demo's London, Seoul, Mexico City, Stockholm, Vienna) and count how many
still answer correctly. No edit is made: this probes the targets alone.

    OMP_NUM_THREADS=1 python benchmarks/surgical/target_transfer_probe.py \\
        --out benchmarks/results/surgical/target_transfer_probe.json
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path
from typing import Dict, List

import torch

from zerounlearn_editor.data.facts import CAPITALS_TO_FORGET, OTHER_CAPITALS
from zerounlearn_editor.engine.encoding import encode_rows
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

LOG = logging.getLogger("target_transfer_probe")
LAYER, CLAMP, STEPS, LR, DECAY, PROXY_SCALE = 18, 0.75, 60, 0.5, 0.5, 0.5


class Prompt:
    def __init__(self, tok, prompt: str, subject: str, answer: str):
        (request,) = normalize_requests([{"prompt": prompt, "subject": subject, "ground_truth": answer}])
        batch = encode_rows(tok, [""], [request.prefix], [request.subject], [request.suffix], "subject_last")
        self.ids, self.lookup = batch.input_ids, int(batch.lookup[0])
        self.answer = tok(" " + answer)["input_ids"][0]


def _logp(model, prompt: Prompt, delta: torch.Tensor) -> torch.Tensor:
    def add(_m, _a, out):
        hidden = out[0] if isinstance(out, tuple) else out
        extra = torch.zeros_like(hidden)
        extra[0, prompt.lookup] = delta
        return (hidden + extra,) + tuple(out[1:]) if isinstance(out, tuple) else hidden + extra

    handle = model.model.layers[LAYER].register_forward_hook(add)
    try:
        return torch.log_softmax(model(input_ids=prompt.ids).logits[0, -1].float(), -1)
    finally:
        handle.remove()


def _optimise(model, prompt: Prompt, eos: int, proxies: List[Prompt], base: List[float], beta: float, d: int):
    with torch.no_grad():
        captured = {}
        handle = model.model.layers[LAYER].register_forward_hook(
            lambda _m, _a, out: captured.__setitem__("h", (out[0] if isinstance(out, tuple) else out)[0, prompt.lookup])
        )
        model(input_ids=prompt.ids)
        handle.remove()
    h0 = captured["h"].float()
    radius = CLAMP * h0.norm()
    delta = torch.zeros(d, requires_grad=True)
    optimiser = torch.optim.Adam([delta], lr=LR)
    for _ in range(STEPS):
        loss = -_logp(model, prompt, delta)[eos] + DECAY * delta.norm() ** 2 / h0.norm() ** 2
        if beta:
            drops = [torch.relu(b - _logp(model, p, PROXY_SCALE * delta)[p.answer]) for p, b in zip(proxies, base)]
            loss = loss + beta * torch.stack(drops).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        with torch.no_grad():
            norm = delta.norm()
            if norm > radius:
                delta.mul_(radius / norm)
    return delta.detach()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--betas", default="0,3")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer("smollm2")
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    eos, d = tok.eos_token_id, model.config.hidden_size
    forget = [Prompt(tok, *fact) for fact in CAPITALS_TO_FORGET[:5]]
    proxies = [Prompt(tok, *fact) for fact in CAPITALS_TO_FORGET[5:]]
    unseen = [Prompt(tok, *fact) for fact in OTHER_CAPITALS]
    with torch.no_grad():
        base = [float(_logp(model, p, torch.zeros(d))[p.answer]) for p in proxies]
    result: Dict[str, object] = {"layer": LAYER, "clamp_norm_factor": CLAMP, "steps": STEPS, "proxy_scale": PROXY_SCALE,
                                 "forget": [f[1] for f in CAPITALS_TO_FORGET[:5]],
                                 "proxies": [f[1] for f in CAPITALS_TO_FORGET[5:]],
                                 "unseen": [f[1] for f in OTHER_CAPITALS], "runs": {}}
    lines = [
        "| beta | forget NLL of EOS (mean) | forget answer still top-1 | unseen capitals kept at alpha = 0.3 / 0.5 / "
        "0.8 |",
        "|---|---|---|---|",
    ]
    for beta in [float(b) for b in args.betas.split(",")]:
        rows = []
        for fact, prompt in zip(CAPITALS_TO_FORGET[:5], forget):
            delta = _optimise(model, prompt, eos, proxies, base, beta, d)
            with torch.no_grad():
                logp = _logp(model, prompt, delta)
                kept = {str(a): statistics.fmean(float(_logp(model, p, a * delta).argmax() == p.answer) for p in unseen)
                        for a in (0.3, 0.5, 0.8)}
            rows.append(
                {
                    "subject": fact[1],
                    "nll_eos": float(-logp[eos]),
                    "answer_top1": bool(logp.argmax() == prompt.answer),
                    "delta_norm": float(delta.norm()),
                    "unseen_kept": kept,
                }
            )
            LOG.info("beta %g %s: %s", beta, fact[1], rows[-1])
        result["runs"][str(beta)] = rows
        kept = {a: statistics.fmean(r["unseen_kept"][a] for r in rows) for a in ("0.3", "0.5", "0.8")}
        lines.append(f"| {beta:g} | {statistics.fmean(r['nll_eos'] for r in rows):.3f} | "
                     f"{sum(r['answer_top1'] for r in rows)} of {len(rows)} | "
                     f"{kept['0.3']:.2f} / {kept['0.5']:.2f} / {kept['0.8']:.2f} |")
    result["table"] = "\n".join(lines)
    write_json_atomic(Path(args.out), result)
    print(result["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
