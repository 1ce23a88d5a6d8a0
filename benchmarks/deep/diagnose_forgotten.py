"""Where does the forgotten answer survive? (issue 45 item 1, the diagnosis)

On one half of the 80 known CounterFact facts (``--half tune``: the TUNE half of ``audit_variants.py``; one batch,
``--seed``), for the unedited model and each ``--variant NAME=YAML`` edit (cached under ``OUT/edits/``):

* **mc**: the audit's multiple-choice options (true answer + 3 distractors, the audit's draw for the seed); per
  layer through the logit lens, the true answer's rank among the options by first-token log-probability and the
  first layer where it wins; at the output, the full-answer score split into first token and later tokens;
* **relearn**: the audit's related-facts fine-tune (MLP scope, 10 Adam steps, lr 1e-4) of the edited model: the
  relative change of every MLP weight, and the forgotten prompts re-read with the fine-tune's change undone in the
  edited layers only / kept only there;
* **int4**: per edited weight, the edit's entries against half the int4 quantization step (``--scheme``: the audit's
  ``int4g16``, groups of 16, or ``int4``, per output channel), and the edit's effect on the forgotten keys against
  the quantization error's; the forgotten prompts on copies quantized everywhere / only in the edited weights /
  all but there, and per edited weight; per fact the output margin (answer's first-token logit minus the best
  other token's).

``--parts`` runs a subset of mc, relearn, int4. ``--retain-variant NAME=YAML`` adds a retain-aware row
(``ZeroUnlearn-GD+R`` reading YAML) fed the retain set ``--retain POLICY:K`` draws for the seed (the audit's draw).

Writes ``OUT/diagnosis.json``, ``OUT/diagnosis.md`` and ``OUT/diagnosis.png``.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD ZEROUNLEARN_DATA_DIR=../shared/data \\
        python benchmarks/deep/diagnose_forgotten.py --half tune --n 40 --seed 1 \\
        --out benchmarks/results/audit/diagnosis \\
        --variant paper=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml \\
        --variant deep=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct-deep.yaml

    # int4 per channel, REPORT half, the rm-r8 candidate (retain-aware) and the paper YAML:
    ... diagnose_forgotten.py --half report --n 40 --seed 1 --out OUT --parts int4 --scheme int4 \\
        --retain same-answer:10 --retain-variant rm-r8=benchmarks/deep/levers/retain-many-rank-w1-m8-k3-s50.yaml \\
        --variant paper=hparams/ZeroUnlearn-GD/SmolLM2-135M-Instruct.yaml
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from zerounlearn_editor.data.datasets import load_cases, sample_cases
from zerounlearn_editor.evaluation.audit.facts_audit import generic_passages
from zerounlearn_editor.evaluation.audit.items import audit_pool, builtin_pool, items_from_cases, pool_from_cases
from zerounlearn_editor.evaluation.audit.plan import AuditSettings, build_plan
from zerounlearn_editor.evaluation.audit.quantize import QUANT_SCHEMES
from zerounlearn_editor.harness.forgotten_edits import cached_edit, edit_key
from zerounlearn_editor.harness.method_rows import default_registry
from zerounlearn_editor.harness.retain_sets import check_retain_disjoint, draw_retain, parse_retain_spec
from zerounlearn_editor.harness.run_setup import prepare_run, setup_methods
from zerounlearn_editor.support.files import read_json, sha256_of_json, write_json_atomic, write_text_atomic
from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_variants import half_of  # noqa: E402
from diagnosis_report import diagnosis_markdown, diagnosis_plot  # noqa: E402
from known_cases import add_variants, cached_known_selection  # noqa: E402

LOG = logging.getLogger("diagnose_forgotten")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="counterfact-easyedit")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--half", choices=("tune", "report"), default="tune")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=YAML",
                    help="an edit row: the YAML's method reading it (the first one's YAML is the main hparams)")
    ap.add_argument("--retain-variant", action="append", default=[], metavar="NAME=YAML",
                    help="a retain-aware edit row (ZeroUnlearn-GD+R reading YAML), fed the --retain draw")
    ap.add_argument("--retain", default=None, metavar="POLICY:K", help="the retain draw (siblings:K, same-answer:K)")
    ap.add_argument("--scheme", choices=("int4g16", "int4"), default="int4g16",
                    help="the int4 part's quantization: groups of 16 (int4g16) or per output channel (int4)")
    ap.add_argument("--parts", default="mc,relearn,int4", help="comma-separated subset of mc, relearn, int4")
    ap.add_argument("--known-cache", default="benchmarks/results/deep/known_counterfact_easyedit.json")
    ap.add_argument("--edits-only", action="store_true", help="compute (cache) the edits and stop")
    ap.add_argument("--report-only", action="store_true", help="rewrite OUT/diagnosis.md and .png from its JSON")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    if args.report_only:
        write_report(out, read_json(out / "diagnosis.json"))
        return
    rows = args.retain_variant + args.variant
    if not rows:
        ap.error("--variant / --retain-variant NAME=YAML: at least one edit row is needed")
    if args.retain_variant and parse_retain_spec(args.retain) is None:
        ap.error("--retain-variant needs --retain POLICY:K")
    parts = tuple(p for p in args.parts.split(",") if p)
    if not parts or set(parts) - {"mc", "relearn", "int4"}:
        ap.error(f"--parts {args.parts!r}: a comma-separated subset of mc, relearn, int4")
    registry = default_registry()
    add_variants(registry, args.retain_variant, "ZeroUnlearn-GD+R")
    add_variants(registry, args.variant)
    names = [v.split("=", 1)[0] for v in rows]
    main_yaml = rows[0].split("=", 1)[1]
    setup = setup_methods(names, {}, main_yaml, registry, what="diagnosis: ")
    all_cases = load_cases(args.data)
    model, tok = load_model_and_tokenizer(str(setup.lookup.main.model_name))
    model.eval()
    known = half_of(cached_known_selection(Path(args.known_cache)), args.half)(model, tok, all_cases, None)
    cases = sample_cases(known, args.n, args.seed)
    requests = [dict(c.request) for c in cases]
    case_ids = [c.case_id for c in cases]
    draw = parse_retain_spec(args.retain)
    retain = draw_retain(draw, cases, all_cases, args.seed) if draw else None
    if retain is not None:
        check_retain_disjoint(retain, cases)
    run = prepare_run(setup, model, tok, out, names, progress=False)
    fingerprint = sha256_of_json(run.fingerprint.digests)
    edits = {}
    for name in names:
        given = retain if run.prepared[name].uses_retain else None
        key = edit_key(setup.signatures[name], case_ids, fingerprint, given)
        path = out / "edits" / f"{name}.safetensors"
        edits[name] = cached_edit(run.prepared[name], model, tok, requests, run.bank, path, key, given)
        run.fingerprint.verify(model, f"after the {name} edit")
    if args.edits_only:
        return
    from zerounlearn_editor.harness.forgotten_diagnosis import DiagnosisInputs, run_diagnosis

    settings = AuditSettings(families=("choice", "relearning"), seed=args.seed)
    pool = audit_pool(pool_from_cases(all_cases), builtin_pool())
    main_hp = setup.lookup.main
    plan = build_plan(items_from_cases(cases), pool, tok, settings, generic_passages(main_hp.mom2_dataset))
    inputs = DiagnosisInputs(plan=plan, settings=settings, requests=requests, edits=edits,
                             layer_module_tmp=main_hp.layer_module_tmp, ln_f_module=main_hp.ln_f_module,
                             fact_token=main_hp.fact_token, edited_layers=list(main_hp.layers),
                             quant=QUANT_SCHEMES[args.scheme], parts=parts)
    result = run_diagnosis(model, tok, inputs)
    run.fingerprint.verify(model, "after the diagnosis")
    result["run"] = {"half": args.half, "n": len(cases), "seed": args.seed, "case_ids": case_ids,
                     "variants": dict(v.split("=", 1) for v in rows), "data": args.data,
                     "retain": args.retain, "retain_variants": [v.split("=", 1)[0] for v in args.retain_variant],
                     "scheme": args.scheme, "parts": list(parts),
                     "settings": settings.to_dict(), "plan": plan.describe()}
    write_json_atomic(out / "diagnosis.json", result)
    write_report(out, result)


def write_report(out: Path, result: dict) -> None:
    """``OUT/diagnosis.md`` and ``OUT/diagnosis.png`` of a diagnosis result."""
    write_text_atomic(out / "diagnosis.md", diagnosis_markdown(result))
    diagnosis_plot(result, out / "diagnosis.png")


if __name__ == "__main__":
    main()
