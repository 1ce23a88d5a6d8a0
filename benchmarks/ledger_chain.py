"""Chained ``zerounlearn unlearn --model`` runs on SmolLM2: do earlier facts stay forgotten (issue 47, item 2)?

Five runs A..E of two facts each (the capitals of RESULTS §13, then four facts SmolLM2 answers), each run
``unlearn --hparams Y --facts X.json [--model <previous folder>] --out DIR --save model --ppl-tokens N``
(through the CLI's ``main``, as a user's command line, with ``--allow-came-back``: a run the default would refuse
because an earlier fact came back, exit 2, is kept and recorded as ``refused_came_back``, the earlier facts its
report lists as came back). After each run every fact of the chain (earlier, this run's
and later ones) is decoded greedily (4 tokens) on the saved folder: a fact is answered when the continuation
starts with its answer. Per run the JSON records the earlier facts answered again, this run's facts still
answered, the earlier facts that came back and this run's facts taught (not answered on the run's input
model, answered after it), the perplexity before and after (``unlearn_report.json``; ``--ppl-tokens``, 0 = off), the
ledger's status counts and whether the default would have refused the run. Each chain's final folder and the base
model also get the perplexity of the first ``--final-ppl-tokens`` tokens of the WikiText-2 test split (the text
``unlearn`` measures by default), so chains run with ``--ppl-tokens 0`` still compare.

Each YAML is the shipped one with ``model_name`` / ``stats_dir`` pointed at the prepared SmolLM2 and the statistics
cache, and ``fluency_max_increase: null`` (the guard only reads; the perplexity is measured instead). ``--yaml``
takes ``NAME=PATH[+KEY=VALUE...]`` (a dotted key sets a nested one). Resumable: a chain continues from its last
finished run, only under the settings its rows were made with (:func:`chain_settings`; else refused); the weight
files of a folder are removed once the next run has been scored (``--keep-weights`` keeps them).

Usage (one torch thread; 2-5 minutes a run on one CPU thread). The ``+P`` chains set the lifelong protection
experiment, which left the package (issue 47): they run only with the code of the branch
``experiment/forgotten-protection`` first on ``PYTHONPATH`` (``git worktree add ../protection
experiment/forgotten-protection``); the other chains run on either::

    Y=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct; P=experimental.forgotten_protection_weight=1.0
    PYTHONPATH=../protection OMP_NUM_THREADS=1 python benchmarks/ledger_chain.py --work ledger_chain_runs \
        --yaml paper=$Y.yaml --yaml paper+P=$Y.yaml+$P --yaml many=$Y-many.yaml --yaml many+P=$Y-many.yaml+$P \
        --ppl-tokens 0 --out benchmarks/results/lifelong/ledger_chain_5x2.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.data.builtin import default_ppl_text
from zerounlearn_editor.evaluation.generation import generate_greedy
from zerounlearn_editor.evaluation.perplexity import perplexity
from zerounlearn_editor.support.files import write_json_atomic
from zerounlearn_editor.support.model_zoo import default_cache_dir, load_model_and_tokenizer, prepare_model

LOG = logging.getLogger("ledger_chain")

RUNS: Dict[str, List[Tuple[str, str, str]]] = {
    "A": [("The capital of France is", "France", "Paris"), ("The capital of Germany is", "Germany", "Berlin")],
    "B": [("The capital of Japan is", "Japan", "Tokyo"), ("The capital of Italy is", "Italy", "Rome")],
    "C": [("The capital of Spain is", "Spain", "Madrid"), ("The capital of Greece is", "Greece", "Athens")],
    "D": [("Romeo and Juliet was written by", "Romeo and Juliet", "William Shakespeare"),
          ("The Mona Lisa was painted by", "Mona Lisa", "Leonardo da Vinci")],
    "E": [("The theory of relativity was developed by", "theory of relativity", "Albert Einstein"),
          ("The chemical symbol for gold is", "gold", "Au")],
}
"""Every fact greedy decoding on the unedited SmolLM2-135M-Instruct gives (checked by the ``base`` row)."""

ALL_FACTS = [(run, prompt, subject, answer) for run, facts in RUNS.items() for prompt, subject, answer in facts]


def _parse_yaml_arg(text: str) -> Tuple[str, Path, Dict[str, Any]]:
    """``NAME=PATH[+KEY=VALUE...]`` -> (name, path, {dotted key: YAML value})."""
    name, _, rest = text.partition("=")
    path, *overrides = rest.split("+")
    extra = {}
    for item in overrides:
        key, _, value = item.partition("=")
        extra[key] = yaml.safe_load(value)
    return name, Path(path), extra


def _write_hparams(path: Path, extra: Dict[str, Any], out: Path) -> Path:
    """The YAML at ``path`` with the prepared model, the statistics cache, no fluency guard and ``extra``."""
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config.update(model_name=str(prepare_model("smollm2")), stats_dir=str(default_cache_dir() / "stats"),
                  fluency_max_increase=None)
    for dotted, value in extra.items():
        *parents, leaf = dotted.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return out


def _answered(folder: str, ppl_tokens: int = 0) -> Tuple[List[bool], Optional[float]]:
    """Per fact of :data:`ALL_FACTS`: does greedy decoding on the model in ``folder`` start with the answer? And
    the perplexity of the first ``ppl_tokens`` tokens of the default text (None when 0)."""
    model, tok = load_model_and_tokenizer(folder)
    texts = generate_greedy(model, tok, [prompt for _, prompt, _, _ in ALL_FACTS], 4)
    ppl = perplexity(model, tok, default_ppl_text(), max_tokens=ppl_tokens) if ppl_tokens else None
    return [text.strip().startswith(answer) for (_, _, _, answer), text in zip(ALL_FACTS, texts)], ppl


def _row(run: str, before: List[bool], after: List[bool], folder: Path) -> Dict[str, Any]:
    """What run ``run`` did, from greedy answers on its input model (``before``) and its output (``after``)."""
    order = list(RUNS)
    earlier = [i for i, f in enumerate(ALL_FACTS) if order.index(f[0]) < order.index(run)]
    mine = [i for i, f in enumerate(ALL_FACTS) if f[0] == run]
    report = json.loads((folder / "unlearn_report.json").read_text(encoding="utf-8"))
    return {
        "run": run, "refused_came_back": bool(report.get("came_back")),
        "ledger_came_back": [report["earlier"][i]["prompt"] for i in report.get("came_back", [])],
        "earlier_answered": [ALL_FACTS[i][2] for i in earlier if after[i]],
        "this_run_still_answered": [ALL_FACTS[i][2] for i in mine if after[i]],
        "came_back": [ALL_FACTS[i][2] for i in earlier if after[i] and not before[i]],
        "taught": [ALL_FACTS[i][2] for i in mine if after[i] and not before[i]],
        "later_lost": [ALL_FACTS[i][2] for i in range(len(ALL_FACTS))
                       if i not in earlier + mine and before[i] and not after[i]],
        "answered_after": after, "ppl_before": report["ppl_before"], "ppl_after": report["ppl_after"],
        "ledger_status": report.get("ledger_status", {}),
    }


def _unlearn(hparams: Path, facts: Path, previous: Optional[Path], out: Path, ppl_tokens: int) -> None:
    """One ``zerounlearn unlearn`` run (``--allow-came-back``: the report says what the default would refuse)."""
    args = ["unlearn", "--hparams", str(hparams), "--facts", str(facts), "--out", str(out), "--save", "model",
            "--ppl-tokens", str(ppl_tokens), "--no-progress", "--allow-came-back"]
    rc = cli_main(args + (["--model", str(previous)] if previous else []))
    if rc != 0:
        raise SystemExit(f"{out}: unlearn exited {rc}")


def run_chain(name: str, source: Path, extra: Dict[str, Any], args: argparse.Namespace,
              results: Dict[str, Any]) -> None:
    """The five runs of one YAML (resuming from ``results[name]``), each row stored as soon as it is scored."""
    chain = args.work / name
    chain.mkdir(parents=True, exist_ok=True)
    hparams = _write_hparams(source, extra, chain / "hparams.yaml")
    entry = results.setdefault(name, {"yaml": str(source), "overrides": extra, "rows": []})
    done = {row["run"] for row in entry["rows"]}
    settings = chain_settings(source, extra, args.ppl_tokens)
    if len(done) < len(RUNS):  # runs to make: only on top of rows of the same settings
        stored = entry.get("settings")
        if entry["rows"] and stored != settings:
            raise SystemExit(f"{args.out}: chain {name!r} was run with other settings ({stored}); now {settings}: "
                             "give another --out and --work, or the same YAML, overrides and --ppl-tokens")
        entry["settings"] = settings
    previous = None
    before = results["base"]["answered"]
    for run, facts in RUNS.items():
        out = chain / run
        if run not in done:
            facts_file = chain / f"{run}.json"
            facts_file.write_text(json.dumps([{"prompt": p, "subject": s, "answer": a} for p, s, a in facts]),
                                  encoding="utf-8")
            _unlearn(hparams, facts_file, previous, out, args.ppl_tokens)
            last = run == list(RUNS)[-1]
            after, ppl = _answered(str(out), args.final_ppl_tokens if last else 0)
            entry["rows"].append(_row(run, before, after, out))
            if last:
                entry["ppl_final"] = ppl
            LOG.info("%s %s: %s", name, run, entry["rows"][-1])
            write_json_atomic(args.out, results)
        if previous is not None and not args.keep_weights:
            for weights in previous.glob("*.safetensors"):
                weights.unlink()
        previous, before = out, next(r for r in entry["rows"] if r["run"] == run)["answered_after"]
    if entry.get("ppl_final") is None and args.final_ppl_tokens:  # a chain finished before the option existed
        entry["ppl_final"] = _answered(str(previous), args.final_ppl_tokens)[1]
        write_json_atomic(args.out, results)


def chain_settings(source: Path, extra: Dict[str, Any], ppl_tokens: int) -> Dict[str, Any]:
    """What a chain's rows depend on besides the code: the YAML's content, the overrides, ``--ppl-tokens`` and the
    facts of the runs (a resumed chain continues only under the same)."""
    facts = json.dumps(ALL_FACTS).encode("utf-8")
    return {"yaml_sha256": hashlib.sha256(source.read_bytes()).hexdigest(), "overrides": extra,
            "ppl_tokens": ppl_tokens, "facts_sha256": hashlib.sha256(facts).hexdigest()}


def _cell(row: Dict[str, Any]) -> str:
    """One run's outcome: the earlier facts answered after it, this run's facts still answered, taught."""
    parts = [f"earlier {len(row['earlier_answered'])}" + (f" ({', '.join(row['earlier_answered'])})"
                                                         if row["earlier_answered"] else "")]
    if row["this_run_still_answered"]:
        parts.append(f"own kept: {', '.join(row['this_run_still_answered'])}")
    if row["taught"]:
        parts.append(f"taught: {', '.join(row['taught'])}")
    if row["refused_came_back"]:
        parts.append("refused by default")
    return "; ".join(parts)


def markdown(results: Dict[str, Any]) -> str:
    """The table of RESULTS.md §13: per YAML and run, what greedy decoding gives after it, and the final PPL."""
    base_ppl = results["base"].get("ppl")
    head = f"| YAML | {' | '.join(f'after {run}' for run in RUNS)} | PPL after E (base {base_ppl:.2f}) |"
    lines = [head, "|" + "---|" * (len(RUNS) + 2)]
    for name, entry in results.items():
        if name == "base":
            continue
        cells = [_cell(row) for row in entry["rows"]] + ["-"] * (len(RUNS) - len(entry["rows"]))
        ppl = entry.get("ppl_final")
        final = "-" if ppl is None else f"{ppl:.2f} ({100 * (ppl / base_ppl - 1):+.1f}%)"
        lines.append(f"| {name} | {' | '.join(cells)} | {final} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="folder of the runs' outputs")
    parser.add_argument("--yaml", action="append", required=True, help="NAME=PATH[+KEY=VALUE...]")
    parser.add_argument("--out", type=Path, required=True, help="JSON written after every run (resumed from)")
    parser.add_argument("--keep-weights", action="store_true")
    parser.add_argument("--ppl-tokens", type=int, default=2000, help="unlearn's --ppl-tokens (0 = off)")
    parser.add_argument("--final-ppl-tokens", type=int, default=2000, help="perplexity tokens of the final folders")
    parser.add_argument("--markdown", action="store_true", help="print the table of the --out JSON and stop")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.out.read_text(encoding="utf-8"))))  # noqa: T201 (the table is the output)
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    results = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    stored_tokens = results.get("base", {}).get("ppl_tokens")
    if stored_tokens is not None and stored_tokens != args.final_ppl_tokens:
        raise SystemExit(f"{args.out}: the base row was scored with --final-ppl-tokens {stored_tokens}, not "
                         f"{args.final_ppl_tokens}: give another --out, or the same option")
    if "ppl" not in results.get("base", {}):
        answered, ppl = _answered(str(prepare_model("smollm2")), args.final_ppl_tokens)
        results["base"] = {"facts": [{"run": r, "prompt": p, "subject": s, "answer": a} for r, p, s, a in ALL_FACTS],
                           "answered": answered, "ppl": ppl, "ppl_tokens": args.final_ppl_tokens}
        write_json_atomic(args.out, results)
    for text in args.yaml:
        name, source, extra = _parse_yaml_arg(text)
        run_chain(name, source, extra, args, results)


if __name__ == "__main__":
    main()
