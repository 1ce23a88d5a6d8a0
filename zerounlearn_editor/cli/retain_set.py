"""``zerounlearn retain-set``: draft a retain file of facts that share the answers of the facts to forget."""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from zerounlearn_editor.cli.common import int_at_least


def _cmd_retain_set(args: argparse.Namespace) -> int:
    from zerounlearn_editor.applications.retain_set import build_retain_set, known_facts_mask, read_facts, read_pool

    if args.generate and not args.model:
        raise ValueError("retain-set --generate needs --model: the model writes the pool and checks each record")
    # read once; bad input fails before the model loads
    facts, pool = read_facts(args.facts), None if args.generate else read_pool(args.pool)
    model = tok = serve = None
    if args.model:
        from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

        model, tok = load_model_and_tokenizer(args.model, args.device)
        serve = known_facts_mask(model, tok, facts)  # scored once: the pool is written only for the facts served
    if args.generate:
        from zerounlearn_editor.applications.generated_pool import generate_pool

        pool = generate_pool(model, tok, facts, seed=args.seed, serve=serve)
    result = build_retain_set(facts, pool, k=args.k, seed=args.seed, out=args.out, serve=serve)
    print(f"{result.summary()} -> {args.out}")
    return 0


def register(sub: Any, parents: ModuleType) -> None:
    """Add ``retain-set`` to the ``zerounlearn`` subparsers (``parents``: :mod:`.common`)."""
    p = sub.add_parser(
        "retain-set",
        help="draft a retain file: facts of a pool (or facts the model writes) that share the answers of the facts "
        "to forget",
        description="For each fact of --facts (with --model: each fact the model knows), up to --k facts of --pool "
        "with the same answer, never one naming a forgotten subject; the output is the JSON list "
        "`unlearn --retain` reads. Without a pool, --generate has the model write one: names it lists after each "
        "fact's subject, in the fact's prompt, kept where it gives the fact's answer. On Gemma-3: many facts with "
        "-many.yaml, benchmarks/RESULTS.md 12.29 (a pool) and 12.37 (--generate); 50 facts with "
        "gemma-3-270m-retain.yaml, 12.34 (measured with such a draft from CounterFact train, and with the bench's "
        "same-answer draw).",
        parents=[parents.out("retain file to write (JSON)", required=True, metavar="FILE"),
                 parents.model("serve only the facts this model knows (default: every fact with an answer)"),
                 parents.seed(), parents.device()],
    )
    p.add_argument("--facts", required=True, metavar="FILE", help="facts to forget (.json, .jsonl, .yaml; as unlearn)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--pool", metavar="FILE|NAME",
                        help="facts to draw from: a dataset name or benchmark file, or a facts file with answers")
    source.add_argument("--generate", action="store_true",
                        help="no pool: the --model writes one (names like each fact's subject, in its prompt, kept "
                        "where the model gives its answer; about 7 s a fact for Gemma-3-270m on one CPU thread)")
    p.add_argument("--k", type=int_at_least(1), default=10, help="retain facts per fact to forget (default 10)")
    p.set_defaults(func=_cmd_retain_set)
