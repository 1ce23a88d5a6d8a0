"""Where does a forgotten answer survive the edit? The audit's diagnosis (issue 45 item 1), per row.

For the unedited model (row ``base``) and each edit (``{parameter name: edited value}``, applied for the row and
restored after it), on the audit plan's facts:

* ``mc``: per decoder layer through the logit lens, the true answer's rank among the multiple-choice options by
  first-token logit (:func:`~zerounlearn_editor.evaluation.audit.lens.lens_option_ranks`), the first layer where it
  wins; at the output the full-answer score split into first and later tokens
  (:func:`~zerounlearn_editor.evaluation.audit.diagnosis.margin_split`);
* ``relearn``: the audit's related-facts fine-tune (MLP scope, the plan's facts, the settings' steps and lr): the
  relative change of every MLP weight, and the forgotten prompts re-read with the fine-tune's change undone in the
  edited layers only / kept only there (also for the edited matrices alone);
* ``int4``: per edited weight, :func:`~zerounlearn_editor.evaluation.audit.diagnosis.edit_against_quantization`
  with the forgotten facts' keys (the edited module's input at the edit's lookup token, read on the edited model);
  ``int4_reads``: the forgotten prompts on RTN copies (``DiagnosisInputs.quant``: int4 in groups of 16 unless
  given; per channel is ``(4, None)``) quantized everywhere / only in the edited weights / everywhere but there,
  and the same per edited weight (where does the int4 recovery come from); each read lists per fact whether the
  answer's first token is the greedy next token and its output margin (that token's logit minus the best other
  token's).

``DiagnosisInputs.parts`` picks the parts run (default all three).
"""
from __future__ import annotations

import logging
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from zerounlearn_editor.data.types import Probe
from zerounlearn_editor.engine.keys import read_keys_and_hidden
from zerounlearn_editor.engine.requests import normalize_requests
from zerounlearn_editor.evaluation.audit.diagnosis import (
    edit_against_quantization,
    first_and_rest,
    first_winning_layer,
    margin_split,
    relative_change,
    splice,
    winning_from,
)
from zerounlearn_editor.evaluation.audit.lens import lens_option_ranks
from zerounlearn_editor.evaluation.audit.plan import AuditPlan, AuditSettings
from zerounlearn_editor.evaluation.audit.quantize import quantized_copy
from zerounlearn_editor.evaluation.audit.relearn import relearned_copy
from zerounlearn_editor.evaluation.batching import encode_probe, logits_at, padded_batches
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.evaluation.teacher_forcing import encode_answers, token_log_probs
from zerounlearn_editor.harness.forgotten_edits import applied

LOG = logging.getLogger(__name__)
_LAYER = re.compile(r"\.(\d+)\.")
PARTS = ("mc", "relearn", "int4")


@dataclass
class DiagnosisInputs:
    """The plan (with ``choice`` and ``relearning`` drawn), its settings, the forgotten requests (dicts), the edits by
    row name, the module templates and the edited layers (those of the edits' YAML, used for the base row too);
    ``quant``: the RTN ``(bits, group_size)`` of the int4 parts (``group_size`` None: per output channel);
    ``parts``: which of ``mc``, ``relearn``, ``int4`` run."""

    plan: AuditPlan
    settings: AuditSettings
    requests: Sequence[Mapping[str, Any]]
    edits: Mapping[str, Mapping[str, torch.Tensor]]
    layer_module_tmp: str
    ln_f_module: str
    fact_token: str
    edited_layers: Sequence[int]
    batch_size: int = 16
    quant: Tuple[int, Optional[int]] = (4, 16)
    parts: Sequence[str] = PARTS


def layer_of(name: str) -> int:
    """The layer index in a parameter name (``model.layers.17.mlp.down_proj.weight`` -> 17)."""
    found = _LAYER.search(name)
    if found is None:
        raise ValueError(f"no layer index in parameter name {name!r}")
    return int(found.group(1))


def mc_diagnosis(model: nn.Module, tok: Any, inputs: DiagnosisInputs) -> Dict[str, Any]:
    """The ``mc`` part (module docstring) for the facts with at least 2 options."""
    plan = inputs.plan
    rows = [(item.prompt, opts) for item, opts in zip(plan.items, plan.choice_options) if len(opts) > 1]
    ranks = lens_option_ranks(model, tok, [p for p, _ in rows], [o for _, o in rows], inputs.layer_module_tmp,
                              inputs.ln_f_module, inputs.batch_size)  # [n, L]
    pairs = [(prompt, option) for prompt, opts in rows for option in opts]
    firsts, rests = [], []
    with torch.no_grad():
        for start in range(0, len(pairs), inputs.batch_size):
            batch = encode_answers(tok, pairs[start:start + inputs.batch_size])
            first, rest = first_and_rest(token_log_probs(model, batch).cpu(), batch.target_mask)
            firsts.append(first)
            rests.append(rest)
    first_all, rest_all = torch.cat(firsts), torch.cat(rests)
    facts, at = [], 0
    for (_, opts), fact_ranks in zip(rows, ranks):
        split = margin_split(first_all[at:at + len(opts)], rest_all[at:at + len(opts)])
        at += len(opts)
        facts.append({**split, "lens_ranks": fact_ranks.tolist(), "first_win_layer": first_winning_layer(fact_ranks),
                      "wins_from_layer": winning_from(fact_ranks)})
    n = len(facts)
    wins = [f for f in facts if f["wins"]]
    return {
        "n": n,
        "win_pct": 100.0 * len(wins) / n,
        "first_token_win_pct": 100.0 * sum(f["first_wins"] for f in facts) / n,
        "carried_by_first": sum(f["carried_by"] == "first" for f in facts),
        "carried_by_later": sum(f["carried_by"] == "later" for f in facts),
        "lens_win_pct_per_layer": [100.0 * float((ranks[:, l] == 0).double().mean()) for l in range(ranks.shape[1])],
        "lens_mean_rank_per_layer": [float(ranks[:, l].double().mean()) for l in range(ranks.shape[1])],
        "median_first_win_layer": _median([f["first_win_layer"] for f in facts]),
        "never_wins_in_lens": sum(f["first_win_layer"] is None for f in facts),
        "median_wins_from_layer": _median([f["wins_from_layer"] for f in facts]),
        "median_margin": statistics.median(f["margin"] for f in facts),
        "median_first_margin": statistics.median(f["first_margin"] for f in facts),
        "median_rest_margin": statistics.median(f["rest_margin"] for f in facts),
        "facts": facts,
    }


def _median(values: Sequence[Any]) -> Any:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _mean(values: Sequence[float]) -> Any:
    return statistics.mean(values) if values else None


def _read_prompts(model: nn.Module, tok: Any, plan: AuditPlan, batch_size: int, per_fact: bool = False
                  ) -> Dict[str, Any]:
    """The forgotten prompts: % whose answer's first token is the greedy next token, and the answers' mean summed
    log-probability, ``recovered`` (0/1 per fact); ``per_fact`` adds ``margins`` (:func:`output_margins`)."""
    probes = [Probe(item.prompt, item.answer) for item in plan.items]
    scores = evaluate_probes(model, tok, probes, batch_size)
    logps = [n * math.log(p) if p > 0 else -math.inf for p, n in zip(scores["prob"], scores["n_tokens"])]
    read: Dict[str, Any] = {"recovered_pct": 100.0 * sum(scores["first_acc"]) / len(probes),
                            "mean_answer_logp": statistics.mean(logps),
                            "recovered": [int(x) for x in scores["first_acc"]]}
    if per_fact:
        read["margins"] = output_margins(model, tok, probes, batch_size)
    return read


@dataclass(frozen=True)
class FirstAnswerToken:
    """At the position predicting a probe's first answer token: that token's id, the greedy token's id, the
    answer's rank among the logits (0: it is the greedy token) and its margin (its logit minus the highest other)."""

    answer_id: int
    greedy_id: int
    rank: int
    margin: float


def first_answer_tokens(model: nn.Module, tok: Any, probes: Sequence[Probe], batch_size: int = 16
                        ) -> List[FirstAnswerToken]:
    """:class:`FirstAnswerToken` per probe (the answer's first token as the audit scores it, :func:`encode_probe`);
    the prompts in left-padded batches of ``batch_size``, the output head at the last position only."""
    encoded = [encode_probe(tok, probe) for probe in probes]
    prompts = [e.input_ids[:e.answer_start] for e in encoded]
    out: List[Optional[FirstAnswerToken]] = [None] * len(probes)
    for indices, batch in padded_batches(model, tok, prompts, batch_size, padding_side="left"):
        last = torch.tensor([batch.input_ids.shape[1] - 1])
        logits = logits_at(model, batch, last)[:, 0].double().cpu()  # [batch, vocab]
        for row, i in enumerate(indices):
            target = encoded[i].input_ids[encoded[i].answer_start]
            others = torch.cat([logits[row, :target], logits[row, target + 1:]])
            out[i] = FirstAnswerToken(target, int(logits[row].argmax()), int((logits[row] > logits[row, target]).sum()),
                                      float(logits[row, target] - others.max()))
    return out  # type: ignore[return-value]


def output_margins(model: nn.Module, tok: Any, probes: Sequence[Probe], batch_size: int = 16) -> List[float]:
    """Per probe, :class:`FirstAnswerToken`'s margin (> 0: the answer is the greedy next token)."""
    return [token.margin for token in first_answer_tokens(model, tok, probes, batch_size)]


def relearn_diagnosis(model: nn.Module, tok: Any, inputs: DiagnosisInputs, edited_names: Sequence[str]
                      ) -> Dict[str, Any]:
    """The ``relearn`` part (module docstring) on ``model`` as it is (edited or not); ``edited_names``: the edited
    matrices' parameter names."""
    settings = inputs.settings
    before = {n: p.detach().clone() for n, p in model.named_parameters() if ".mlp." in n}
    twin = relearned_copy(model, tok, "mlp", settings.relearn_steps, settings.relearn_lr,
                          pairs=inputs.plan.relearn_pairs)
    after = {n: p.detach().clone() for n, p in twin.named_parameters() if n in before}
    change = {n: relative_change(after[n], before[n]) for n in before}
    in_layers = [n for n in before if layer_of(n) in set(inputs.edited_layers)]
    variants = {
        "fine-tuned": [],  # names reverted to the pre-fine-tune value
        "undo in edited layers": in_layers,
        "only in edited layers": [n for n in before if n not in in_layers],
        "undo in edited weights": list(edited_names),
        "only in edited weights": [n for n in before if n not in set(edited_names)],
    }
    reads = {"before fine-tune": _read_prompts(model, tok, inputs.plan, inputs.batch_size)}
    for label, reverted in variants.items():
        with applied(twin, splice(after, before, reverted)):
            reads[label] = _read_prompts(twin, tok, inputs.plan, inputs.batch_size)
    del twin
    kinds = sorted({n.split(".mlp.")[1].split(".")[0] for n in before})
    layers = sorted({layer_of(n) for n in before})
    per_layer = {k: [next(change[n] for n in before if layer_of(n) == l and f".mlp.{k}." in n) for l in layers]
                 for k in kinds}
    edited_set = set(inputs.edited_layers)
    return {
        "reads": reads,
        "layers": layers,
        "relative_change_per_layer": per_layer,
        "mean_relative_change_edited_layers": _mean([change[n] for n in in_layers]),
        "mean_relative_change_other_layers": _mean([change[n] for n in before if layer_of(n) not in edited_set]),
        "relative_change_edited_weights": {n: change[n] for n in edited_names},
    }


def int4_diagnosis(model: nn.Module, tok: Any, inputs: DiagnosisInputs, edit: Mapping[str, torch.Tensor],
                   original: Mapping[str, torch.Tensor]) -> Dict[str, Any]:
    """The ``int4`` part (module docstring) at ``inputs.quant``; ``model`` holds the edit, ``original`` the unedited
    values."""
    bits, group_size = inputs.quant
    forget = normalize_requests(inputs.requests)
    out = {}
    for name, new in edit.items():
        module = name.rsplit(".", 1)[0]
        readout = read_keys_and_hidden(model, tok, forget, [""], module, module, inputs.fact_token, 64)
        out[name] = edit_against_quantization(original[name].cpu(), new.cpu(), readout.keys.double(), bits,
                                              group_size)
    return out


def int4_reads(model: nn.Module, tok: Any, inputs: DiagnosisInputs, edited_names: Sequence[str]
               ) -> Dict[str, Dict[str, Any]]:
    """The forgotten prompts read on RTN copies of ``model`` at ``inputs.quant``: every linear weight but the head
    quantized (the audit's ``int4`` / ``int4g16``), only the ``edited_names`` weights, every one but them, and per
    edited weight (``L<layer>``) only it / every one but it, and only the linear weights of the layers before the
    edited ones / of the edited layers but the edited weights / of the layers after; per fact ``recovered`` in
    each, ``margins`` for the unquantized model and the first three."""
    full = quantized_copy(model, inputs.quant)
    params, quantized = dict(model.named_parameters()), dict(full.named_parameters())
    linear = [n for n in quantized if not torch.equal(quantized[n], params[n])]
    edited = [n for n in edited_names if n in quantized]
    reads = {"unquantized": _read_prompts(model, tok, inputs.plan, inputs.batch_size, per_fact=True),
             "int4 everywhere": _read_prompts(full, tok, inputs.plan, inputs.batch_size, per_fact=True)}
    keep = {"int4 only in edited weights": ([n for n in linear if n not in set(edited)], True),
            "int4 everywhere but the edited weights": (edited, True)}
    for name in edited:
        keep[f"int4 only in L{layer_of(name)}"] = ([n for n in linear if n != name], False)
        keep[f"int4 everywhere but L{layer_of(name)}"] = ([name], False)
    if edited:
        low, high = min(map(layer_of, edited)), max(map(layer_of, edited))
        regions = {f"int4 only before L{low}": lambda n: layer_of(n) < low,
                   f"int4 only in L{low}-{high} but the edited weights":
                       lambda n: low <= layer_of(n) <= high and n not in set(edited),
                   f"int4 only after L{high}": lambda n: layer_of(n) > high}
        for label, inside in regions.items():
            keep[label] = ([n for n in linear if not inside(n)], False)
    for label, (unquantized, per_fact) in keep.items():
        with applied(full, {n: params[n] for n in unquantized}):
            reads[label] = _read_prompts(full, tok, inputs.plan, inputs.batch_size, per_fact=per_fact)
    del full
    return reads


def _row(model: nn.Module, tok: Any, inputs: DiagnosisInputs, edited_names: Sequence[str],
         edit: Optional[Mapping[str, torch.Tensor]] = None,
         original: Optional[Mapping[str, torch.Tensor]] = None) -> Dict[str, Any]:
    """One row's parts (``inputs.parts``) on ``model`` as it is; ``edit``/``original``: the row's edit, if any."""
    row: Dict[str, Any] = {}
    if "mc" in inputs.parts:
        row["mc"] = mc_diagnosis(model, tok, inputs)
    if "int4" in inputs.parts and edit is not None and original is not None:
        row["int4"] = int4_diagnosis(model, tok, inputs, edit, original)
    if "relearn" in inputs.parts:
        row["relearn"] = relearn_diagnosis(model, tok, inputs, edited_names)
    if "int4" in inputs.parts:
        row["int4_reads"] = int4_reads(model, tok, inputs, edited_names)
    return row


def run_diagnosis(model: nn.Module, tok: Any, inputs: DiagnosisInputs) -> Dict[str, Any]:
    """Every part for the ``base`` row and each edit; the model is left as it was given."""
    unknown = sorted(set(inputs.parts) - set(PARTS))
    if unknown:
        raise ValueError(f"diagnosis parts: {unknown} unknown (known: {', '.join(PARTS)})")
    params = dict(model.named_parameters())
    rows: Dict[str, Any] = {}
    LOG.info("diagnosis: base")
    first_edit: List[str] = sorted(next(iter(inputs.edits.values()), {}))
    rows["base"] = _row(model, tok, inputs, first_edit)
    for name, edit in inputs.edits.items():
        LOG.info("diagnosis: %s", name)
        original = {n: params[n].detach().clone() for n in edit}
        with applied(model, edit):
            rows[name] = _row(model, tok, inputs, sorted(edit), edit, original)
    return {"rows": rows, "edited_layers": list(inputs.edited_layers),
            "quant": {"bits": inputs.quant[0], "group_size": inputs.quant[1]}}
