"""Never-known CounterFact facts: the audit's reference of a model that never knew the fact.

An unlearning audit is read against a model that never learned the forgotten facts. SmolLM2 cannot be retrained
without them, so the proxy is facts of the same data file that the unedited model does not answer, by the audit's
own criterion for "recovered" on its prompt probe: the answer's first token is the greedy next token after the
request's prompt (``first_acc`` of ``Probe(prompt, ground_truth)``, scored at the audit's batch size). The audit's
``base`` row on these facts then has prompt 0 % by construction, as a perfect edit would, and its other columns
are what each attack finds on facts the model never knew.

The draw matches the relation mix of a reference set (default: the REPORT half of the cached known cases, the
facts §7 of RESULTS.md reports on): for each reference fact, in a seeded order, one unused never-known fact of the
same template (the prompt with the subject as ``{}``, the audit's relation), else of the same CounterFact relation id
(templates mapped to ids by the ROME-format file where a template has one id), else any. It writes
``OUT.json`` (``{"case_ids": [...]}``, sorted by integer id, the order ``audit_variants.py --cases`` audits them in)
and ``OUT.meta.json`` (how they were drawn: criterion, counts, the match per level, both relation mixes).

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=. ZEROUNLEARN_DATA_DIR=../shared/data \\
        python benchmarks/deep/never_known.py --out benchmarks/results/audit/never_known/never_known_seed1 --seed 1
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zerounlearn_editor.data.datasets import load_cases
from zerounlearn_editor.data.types import Probe, UnlearnCase
from zerounlearn_editor.evaluation.audit.items import relation_of
from zerounlearn_editor.evaluation.audit.plan import AuditSettings
from zerounlearn_editor.evaluation.metrics import evaluate_probes
from zerounlearn_editor.support.files import write_json_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from audit_variants import half_of  # noqa: E402
from known_cases import cached_known_selection  # noqa: E402

LOG = logging.getLogger("never_known")
LEVELS = ("template", "relation_id", "any")


def answered(model, tok, cases: Sequence[UnlearnCase], batch_size: int = AuditSettings.batch_size) -> List[bool]:
    """Per case: whether ``model`` answers it on the audit's prompt probe (the request's answer's first token is
    the greedy next token after its prompt), the audit's "recovered" for the ``prompt`` column."""
    probes = [Probe(c.request["prompt"], c.request["ground_truth"]) for c in cases]
    return [f == 1.0 for f in evaluate_probes(model, tok, probes, batch_size)["first_acc"]]


def template_of(case: UnlearnCase) -> str:
    """The audit's relation of an EasyEdit-format CounterFact case: its prompt's template."""
    return relation_of(case.request["prompt"], case.request["subject"])


def template_ids(pairs: Sequence[Tuple[str, str]]) -> Dict[str, str]:
    """``{template: relation_id}`` from ``(template, relation_id)`` pairs, for the templates with exactly one id."""
    ids: Dict[str, set] = collections.defaultdict(set)
    for template, relation_id in pairs:
        ids[template].add(relation_id)
    return {t: next(iter(s)) for t, s in ids.items() if len(s) == 1}


def matched_draw(reference: Sequence[Tuple[str, str]], candidates: Sequence[Tuple[str, str, str]],
                 seed: int) -> Tuple[List[str], List[str]]:
    """Draw one candidate per reference fact, matching its relation.

    ``reference``: ``(template, relation)`` per reference fact; ``candidates``: ``(case_id, template, relation)``.
    Three passes over the reference facts (in an order shuffled with ``seed``), each giving the still unmatched ones
    the first unused candidate (candidates shuffled with ``seed`` once) of the same template, then of the same
    relation, then any. Returns the drawn case ids (in reference order) and the level each match reached
    (:data:`LEVELS`). ``ValueError`` when there are fewer candidates than reference facts."""
    if len(candidates) < len(reference):
        raise ValueError(f"never-known draw: {len(candidates)} candidates for {len(reference)} reference facts")
    rng = random.Random(f"{seed}:never-known")
    order = list(range(len(reference)))
    rng.shuffle(order)
    pool = list(candidates)
    rng.shuffle(pool)
    picked: Dict[int, Tuple[str, str]] = {}
    for level, key in zip(LEVELS, (1, 2, None)):
        for index in order:
            if index in picked:
                continue
            wanted = None if key is None else reference[index][key - 1]
            at = next((i for i, c in enumerate(pool) if key is None or c[key] == wanted), None)
            if at is not None:
                picked[index] = (pool.pop(at)[0], level)
    drawn = [picked[i] for i in range(len(reference))]
    return [d[0] for d in drawn], [d[1] for d in drawn]


def _mix(relations: Sequence[str]) -> Dict[str, int]:
    return dict(sorted(collections.Counter(relations).items(), key=lambda kv: (-kv[1], kv[0])))


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="writes OUT.json and OUT.meta.json")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--rome", default="counterfact", help="ROME-format CounterFact: templates -> relation ids")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--known-cache", default="benchmarks/results/deep/known_counterfact_easyedit.json")
    ap.add_argument("--half", choices=("tune", "report"), default="report", help="the reference facts")
    ap.add_argument("--exclude", action="append", default=[], metavar="FILE",
                    help="a never-known file whose case ids this draw leaves out (a second, disjoint draw)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cases = load_cases(args.data)
    ids_of = template_ids([(template_of(c), c.relation) for c in load_cases(args.rome) if c.relation is not None])
    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(args.model)
    reference = half_of(cached_known_selection(Path(args.known_cache)), args.half)(model, tok, cases, None)
    flags = answered(model, tok, cases)
    excluded = {i for path in args.exclude for i in json.loads(Path(path).read_text())["case_ids"]}
    never_all = [c for c, f in zip(cases, flags) if not f]
    never = [c for c in never_all if c.case_id not in excluded]
    relation = lambda c: ids_of.get(template_of(c), template_of(c))  # noqa: E731
    drawn, levels = matched_draw([(template_of(c), relation(c)) for c in reference],
                                 [(c.case_id, template_of(c), relation(c)) for c in never], args.seed)
    by_id = {c.case_id: c for c in cases}
    ids = sorted(drawn, key=int)
    write_json_atomic(Path(f"{args.out}.json"), {"case_ids": ids})
    meta = {
        "what": "never-known facts: cases the unedited model does not answer on the audit's prompt probe",
        "criterion": "first token of ground_truth is not the greedy next token after prompt (evaluate_probes "
                     f"first_acc != 1, batch size {AuditSettings.batch_size})",
        "data": args.data, "model": args.model, "seed": args.seed, "n": len(ids),
        "n_cases": len(cases), "n_answered": sum(flags), "n_never_known": len(never_all),
        "excluded": sorted(excluded, key=int),
        "reference": {"half": args.half, "known_cache": args.known_cache, "case_ids": [c.case_id for c in reference]},
        "match": dict(collections.Counter(levels)),
        "relation_mix": {"reference": _mix([relation(c) for c in reference]),
                         "drawn": _mix([relation(by_id[i]) for i in ids])},
        "template_to_relation_id": f"{args.rome}: templates with exactly one relation_id ({len(ids_of)})",
    }
    write_json_atomic(Path(f"{args.out}.meta.json"), meta)
    LOG.info("never-known: %d of %d cases not answered; drew %d (match %s)", len(never_all), len(cases), len(ids),
             meta["match"])


if __name__ == "__main__":
    main()
