"""EasyEdit's KnowEdit evaluation for any registered method, as unlearning or as editing.

``benchmarks/run_easyedit_eval.py`` (a thin wrapper of :func:`main`) takes the flags of EasyEdit's
``examples/run_knowedit_llama2.py`` and differs in:

* the hparams class is looked up from ``ALG_DICT[method]`` (:func:`find_hparams_class`), so our
  methods and every method of EasyEdit's ``ALG_DICT`` run unchanged; the YAML's ``alg_name`` must
  name the same method;
* ``--target-new neutral`` (default) unlearns: every ``target_new`` is the neutral target (the YAML's
  ``neutral_target``, else the tokenizer's EOS text); ``--target-new keep`` edits, as the script;
* the true answer of each fact is scored before and after as one more portability input,
  :data:`FORGET_KEY`, so EasyEdit's own metrics measure forgetting (``<...>_unlearning_summary.json``).

Data (:func:`read_edit_data`, checked before any model is loaded): KnowEdit (read with EasyEdit's
``KnowEditDataset``), EasyEdit's flat CounterFact and its ZsRE (:func:`flat_inputs`; every locality
prompt is also scored as a portability input ``<name>_Ground_Truth``, so locality has a pre-edit
value). Requests are edited one at a time through ``BaseEditor.edit`` (``keep_original_weight=True``).
The pre-edit metrics are cached in ``--metrics_save_dir`` under a hash of what they depend on.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from numbers import Number

from zerounlearn_editor.support.files import sha256_of_file, write_text_atomic

LOG = logging.getLogger(__name__)

FORGET_KEY = "Forget_Ground_Truth"
"""The portability input that scores the true answer of each edited fact."""

DATA_FORMATS: Dict[str, Tuple[str, ...]] = {
    "knowedit": ("prompt", "subject", "target_new"),
    "counterfact": ("prompt", "subject", "target_new", "ground_truth", "rephrase_prompt", "locality_prompt",
                    "locality_ground_truth"),
    "zsre": ("src", "subject", "alt", "answers", "rephrase", "loc", "loc_ans"),
}
"""The fields every record of a format must have (KnowEdit: plus ``locality`` or ``portability``)."""

_LOCALITY_NAME = "neighborhood"


@dataclass
class EditData:
    """A data file read for the evaluation: its ``format`` (a key of :data:`DATA_FORMATS`), the raw
    records of the flat formats (first ``--ds_size``; None for KnowEdit) and the SHA-256 of its bytes."""

    path: str
    format: str
    records: Optional[List[Dict[str, Any]]]
    digest: str


def _detect_format(record: Mapping[str, Any]) -> Optional[str]:
    if "src" in record and "alt" in record:
        return "zsre"
    if "locality" in record or "portability" in record:
        return "knowedit"
    if "locality_prompt" in record or "rephrase_prompt" in record:
        return "counterfact"
    return None


def read_edit_data(path: str, size: Optional[int] = None) -> EditData:
    """Read and check ``path`` (a JSON list; see module docstring); errors name the file, record and fields."""
    raw = Path(path).read_bytes() if Path(path).is_file() else None
    if raw is None:
        raise SystemExit(f"--data_dir {path}: no such file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SystemExit(f"--data_dir {path}: not a JSON file ({exc})") from exc
    if not isinstance(data, list) or not data:
        raise SystemExit(f"--data_dir {path}: expected a non-empty JSON list of records")
    if size is not None and size < 1:
        raise SystemExit(f"--ds_size must be >= 1, got {size}")
    data = data[:size] if size else data
    first = data[0]
    fmt = _detect_format(first) if isinstance(first, Mapping) else None
    if fmt is None:
        keys = sorted(first) if isinstance(first, Mapping) else type(first).__name__
        raise SystemExit(
            f"--data_dir {path}: cannot tell the format of record 0 (fields {keys}); expected KnowEdit "
            f"({', '.join(DATA_FORMATS['knowedit'])}, locality/portability), EasyEdit's CounterFact "
            f"({', '.join(DATA_FORMATS['counterfact'])}) or ZsRE ({', '.join(DATA_FORMATS['zsre'])})"
        )
    for index, record in enumerate(data):
        if not isinstance(record, Mapping):
            raise SystemExit(f"--data_dir {path}: record {index} is a {type(record).__name__}, not an object")
        missing = [field for field in DATA_FORMATS[fmt] if field not in record]
        if fmt == "knowedit" and "locality" not in record and "portability" not in record:
            missing.append("locality or portability")
        if missing:
            raise SystemExit(f"--data_dir {path}: record {index} ({fmt} format) lacks field(s) {missing}")
    return EditData(str(path), fmt, None if fmt == "knowedit" else [dict(r) for r in data],
                    hashlib.sha256(raw).hexdigest())


def flat_inputs(data: EditData) -> Dict[str, Any]:
    """``BaseEditor.edit`` arguments from EasyEdit's flat CounterFact or ZsRE records.

    ``rephrase_prompts``; locality input ``neighborhood``; the :data:`FORGET_KEY` portability
    input (the prompt with its true answer) and ``neighborhood_Ground_Truth`` (the locality
    prompt with its answer, scored before and after); ZsRE's ``portability`` question when present.
    """
    if data.format not in ("counterfact", "zsre"):
        raise ValueError(f"flat_inputs reads counterfact or zsre records, got {data.format!r}")
    # prompt, subject, target_new, ground truth, rephrase, locality prompt, locality answer
    columns: List[List[str]] = [[] for _ in DATA_FORMATS[data.format]]
    port_prompts, port_answers = [], []
    for i, r in enumerate(data.records or []):
        for column, name in zip(columns, DATA_FORMATS[data.format]):
            column.append(_first_text(r[name]))  # lists reduced to their first element
            if not column[-1]:
                raise SystemExit(f"{data.path}: record {i} field {name} is empty")
        portability = r.get("portability") if data.format == "zsre" else None
        if isinstance(portability, Mapping) and portability.get("New Question") and _first_text(portability.get("New Answer")):
            port_prompts.append(str(portability["New Question"]))
            port_answers.append(_first_text(portability["New Answer"]))
        else:
            port_prompts.append(None)
            port_answers.append(None)
    prompts, subjects, targets, truths, rephrases, loc_prompts, loc_answers = columns
    portability_inputs: Dict[str, Dict[str, list]] = {
        FORGET_KEY: {"prompt": list(prompts), "ground_truth": list(truths)},
        f"{_LOCALITY_NAME}_Ground_Truth": {"prompt": list(loc_prompts), "ground_truth": list(loc_answers)},
    }
    if any(p is not None for p in port_prompts):
        portability_inputs["New_Question"] = {"prompt": port_prompts, "ground_truth": port_answers}
    return {
        "prompts": prompts,
        "subject": subjects,
        "target_new": targets,
        "ground_truth": truths,
        "rephrase_prompts": rephrases,
        "locality_inputs": {_LOCALITY_NAME: {"prompt": loc_prompts, "ground_truth": loc_answers}},
        "portability_inputs": portability_inputs,
    }


def _norm(name: str) -> str:
    text = re.sub(r"[^a-z0-9]", "", name.lower())
    for suffix in ("hyperparams", "hparams", "params"):
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def _hparams_classes(namespace: Mapping[str, Any]) -> Dict[str, type]:
    return {
        name: value for name, value in namespace.items()
        if inspect.isclass(value) and re.search(r"h(yper)?params$", name, re.IGNORECASE) and hasattr(value, "from_hparams")
    }


def find_hparams_class(method: str, alg_dict: Mapping[str, Any]) -> type:
    """The hyperparameter class of ``ALG_DICT[method]`` (see module docstring); errors name the candidates."""
    if method not in alg_dict:
        raise ValueError(f"--editing_method {method!r} is not in EasyEdit's ALG_DICT; known: {', '.join(sorted(alg_dict))}")
    function = alg_dict[method]
    module_name = getattr(function, "__module__", None) or type(function).__module__
    module = importlib.import_module(module_name)
    candidates = _hparams_classes(vars(module))
    package_name = module_name.rpartition(".")[0]
    if package_name:
        candidates = {**_hparams_classes(vars(importlib.import_module(package_name))), **candidates}
    matching = [cls for cls in candidates.values() if _norm(cls.__name__) == _norm(method)]
    if len({id(c) for c in matching}) == 1:
        return matching[0]
    unique = {id(c): c for c in candidates.values()}
    if not matching and len(unique) == 1:
        return next(iter(unique.values()))
    raise ValueError(
        f"cannot tell the hparams class of {method!r} (function {module_name}.{getattr(function, '__name__', '?')}): "
        f"candidates {sorted(candidates) or 'none'}"
    )


def _prompt_answers(items: Optional[Sequence[Mapping[str, Any]]]) -> Tuple[Optional[List[str]], Optional[List[str]]]:
    """KnowEdit's ``[{prompt, ground_truth}]`` of one record -> (prompts, answers); None stays None.

    Nested answer lists are reduced to their first element; items with an empty answer are dropped.
    """
    if items is None:
        return None, None
    prompts, answers = [], []
    for item in items:
        answer = item["ground_truth"]
        while isinstance(answer, list):
            answer = answer[0] if answer else ""
        if str(answer).strip():
            prompts.append(item["prompt"])
            answers.append(answer)
    return prompts, answers


def _inputs(records: Sequence[Mapping[str, Any]], fields: Mapping[str, str]) -> Dict[str, Dict[str, list]]:
    out: Dict[str, Dict[str, list]] = {}
    for key, field in fields.items():
        pairs = [_prompt_answers(r.get(field)) for r in records]
        out[key] = {"prompt": [p for p, _ in pairs], "ground_truth": [a for _, a in pairs]}
    return out


def knowedit_inputs(records: Sequence[Mapping[str, Any]], datatype: Optional[str]) -> Dict[str, Any]:
    """``BaseEditor.edit`` arguments from KnowEditDataset records, as EasyEdit's script builds them.

    ``counterfact`` / ``recent`` / ``zsre``: locality Relation_Specificity + Forgetfulness,
    portability Subject_Aliasing + reasoning + Logical_Generalization; ``wikibio``: locality
    Relation_Specificity only. Plus the :data:`FORGET_KEY` portability input where the records
    have a ``ground_truth``.
    """
    if datatype not in ("counterfact", "recent", "zsre", "wikibio"):
        raise ValueError(f"--datatype must be counterfact, recent, zsre or wikibio, got {datatype!r}")
    records = list(records)
    if not records:
        raise ValueError("the dataset is empty")
    truths = [_first_text(r.get("ground_truth")) or None for r in records]
    args: Dict[str, Any] = {
        "prompts": [r["prompt"] for r in records],
        "subject": [r["subject"] for r in records],
        "target_new": [r["target_new"] for r in records],
        "ground_truth": truths,
    }
    if datatype == "wikibio":
        args["locality_inputs"] = _inputs(records, {"Relation_Specificity": "locality_rs"})
        args["portability_inputs"] = {}
    else:
        args["locality_inputs"] = _inputs(records, {"Relation_Specificity": "locality_rs", "Forgetfulness": "locality_f"})
        args["portability_inputs"] = _inputs(
            records, {"Subject_Aliasing": "portability_s", "reasoning": "portability_r", "Logical_Generalization": "portability_l"}
        )
    if any(truths):
        prompts = [r["prompt"] if t else None for r, t in zip(records, truths)]
        args["portability_inputs"][FORGET_KEY] = {"prompt": prompts, "ground_truth": list(truths)}
    else:
        LOG.warning("the records have no ground_truth: forgetting is not scored")
    return args


def _first_text(value: Any) -> str:
    while isinstance(value, list):
        value = value[0] if value else ""
    return "" if value is None else str(value).strip()


def _mean(values: Sequence[float]) -> Optional[float]:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else None


def _score(value: Any) -> Optional[float]:
    if isinstance(value, Number):
        return float(value)
    if isinstance(value, (list, tuple)):
        return _mean([p for p in (_score(v) for v in value) if p is not None])
    return None


def _phase_mean(metrics: Sequence[Mapping[str, Any]], phase: str, section: Optional[str], key: str) -> Optional[float]:
    scores = []
    for case in metrics:
        where = case.get(phase, {})
        if section is not None:
            where = where.get(section, {}) if isinstance(where, Mapping) else {}
        score = _score(where.get(key)) if isinstance(where, Mapping) else None
        if score is not None:
            scores.append(score)
    return _mean(scores)


def unlearning_summary(metrics: Sequence[Mapping[str, Any]], mode: Mapping[str, Any]) -> Dict[str, Any]:
    """Means over cases (pre / post) of EasyEdit's metrics and of the true answers' accuracy."""
    keys: Dict[str, set] = {"locality": set(), "portability": set()}
    for case in metrics:
        for section in keys:
            for phase in ("pre", "post"):
                keys[section].update(k for k in case.get(phase, {}).get(section, {}) if k.endswith("_acc"))
    summary: Dict[str, Any] = {"cases": len(metrics), **mode}
    truth = f"{FORGET_KEY}_acc"
    summary["forget_ground_truth_acc"] = {p: _phase_mean(metrics, p, "portability", truth) for p in ("pre", "post")}
    summary["rewrite_acc"] = {p: _phase_mean(metrics, p, None, "rewrite_acc") for p in ("pre", "post")}
    summary["rephrase_acc"] = {p: _phase_mean(metrics, p, None, "rephrase_acc") for p in ("pre", "post")}
    for section, names in keys.items():
        summary[section] = {
            name: {p: _phase_mean(metrics, p, section, name) for p in ("pre", "post")} for name in sorted(names) if name != truth
        }
    for values in summary["locality"].values():
        # EasyEdit's locality accuracy compares post-edit with pre-edit outputs: 1 before the edit
        if values["pre"] is None and values["post"] is not None:
            values["pre"] = 1.0
    summary["fluency_ngram_entropy"] = {
        p: _mean([c[p]["fluency"]["ngram_entropy"] for c in metrics if isinstance(c.get(p, {}).get("fluency"), Mapping)
                  and "ngram_entropy" in c[p]["fluency"]])
        for p in ("pre", "post")
    }
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="EasyEdit's KnowEdit evaluation for any registered method (ZeroUnlearn, ZeroUnlearn-GD, EasyEdit's "
        "ALG_DICT); unlearns by default (neutral target_new), --target-new keep edits like EasyEdit's script"
    )
    parser.add_argument("--editing_method", required=True, type=str)
    parser.add_argument("--hparams_dir", required=True, type=str)
    parser.add_argument("--data_dir", required=True, type=str)
    parser.add_argument("--ds_size", default=None, type=int)
    parser.add_argument("--metrics_save_dir", default="./output", type=str)
    parser.add_argument("--datatype", default=None, type=str)
    parser.add_argument("--train_data_path", type=str, help="IKE: its in-context training data")
    parser.add_argument("--pre_file", default=None, type=str, help="cached pre-edit metrics (default: in --metrics_save_dir)")
    parser.add_argument("--target-new", dest="target_new", choices=["neutral", "keep"], default="neutral",
                        help="neutral (default): unlearn towards the neutral target; keep: the dataset's target_new (editing)")
    parser.add_argument("--no-test-generation", dest="test_generation", action="store_false",
                        help="skip EasyEdit's generation-based fluency (slow on CPU)")
    parser.add_argument("--easyedit-path", default=None, help="EasyEdit source tree (default $EASYEDIT_PATH / sys.path)")
    return parser


def _load_easyedit(path: Optional[str]) -> Dict[str, Any]:  # noqa: D401 - EasyEdit objects
    from zerounlearn_editor.integrations.easyedit import easyedit_available, register_with_easyedit

    if not easyedit_available(path):
        raise SystemExit("EasyEdit is not importable: pass --easyedit-path or set EASYEDIT_PATH to its source tree")
    register_with_easyedit(path)
    return {
        "alg_dict": importlib.import_module("easyeditor.util.alg_dict").ALG_DICT,
        "BaseEditor": importlib.import_module("easyeditor.editors.editor").BaseEditor,
        "KnowEditDataset": importlib.import_module("easyeditor.dataset.knowedit").KnowEditDataset,
    }


def _fmt(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main(argv: Optional[Sequence[str]] = None, easyedit: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Run the evaluation; returns the unlearning summary (also written next to EasyEdit's metrics JSON).

    ``easyedit``: the EasyEdit objects (``alg_dict``, ``BaseEditor``, ``KnowEditDataset``) to
    use instead of importing them (tests).
    """
    args = build_parser().parse_args(argv)
    easyedit = easyedit or _load_easyedit(args.easyedit_path)
    hparams_cls = find_hparams_class(args.editing_method, easyedit["alg_dict"])
    from zerounlearn_editor.engine.hparams import load_config_file

    alg_name = load_config_file(args.hparams_dir).get("alg_name")
    if alg_name != args.editing_method:  # BaseEditor picks the method by the YAML's alg_name
        raise SystemExit(f"{args.hparams_dir}: alg_name is {alg_name!r}, but --editing_method is {args.editing_method!r}")
    hparams = hparams_cls.from_hparams(args.hparams_dir)
    data = read_edit_data(args.data_dir, args.ds_size)  # checked before any model is loaded
    if data.format == "knowedit":
        records = easyedit["KnowEditDataset"](args.data_dir, size=args.ds_size)
        inputs = knowedit_inputs([records[i] for i in range(len(records))], args.datatype)
        datatype = args.datatype
    else:
        if args.datatype not in (None, data.format):
            raise SystemExit(f"--data_dir {args.data_dir} is in EasyEdit's {data.format} format, but --datatype is {args.datatype!r}")
        inputs = flat_inputs(data)
        datatype = data.format
    label = hparams.model_name.rstrip("/").split("/")[-1] if isinstance(hparams.model_name, str) else "model"

    train_ds = None
    if args.editing_method in ("IKE", "ICE"):
        if args.editing_method == "IKE":
            if not args.train_data_path:
                raise SystemExit("IKE needs --train_data_path (its in-context examples)")
            from sentence_transformers import SentenceTransformer

            encode_ike_facts = importlib.import_module("easyeditor.models.ike").encode_ike_facts
            train_ds = easyedit["KnowEditDataset"](args.train_data_path)
            sentence_model = SentenceTransformer(hparams.sentence_model_name).to(f"cuda:{hparams.device}")
            encode_ike_facts(sentence_model, train_ds, hparams)
        else:
            hparams.use_icl_examples = False

    editor = easyedit["BaseEditor"].from_hparams(hparams)
    if args.target_new == "neutral":
        neutral = getattr(hparams, "neutral_target", None) or editor.tok.eos_token
        if not neutral:
            raise SystemExit("--target-new neutral: the hparams have no neutral_target and the tokenizer no EOS token")
        inputs["target_new"] = [neutral] * len(inputs["prompts"])
        mode = {"mode": "unlearn", "target_new": neutral}
        LOG.info("UNLEARNING: every target_new is the neutral target %r (--target-new keep edits instead)", neutral)
    else:
        mode = {"mode": "edit", "target_new": "dataset"}
        LOG.info("EDITING: the dataset's target_new is kept (--target-new keep)")

    out = Path(args.metrics_save_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.editing_method}_{datatype}_{label}"
    # the pre-edit metrics cache is named by a hash of what they depend on
    key_parts = [data.digest, str(args.ds_size), sha256_of_file(args.hparams_dir),
                 json.dumps(mode, sort_keys=True), str(args.test_generation), str(datatype)]
    key = hashlib.sha256("\0".join(key_parts).encode("utf-8")).hexdigest()[:16]
    pre_path = out / f"{label}_{datatype}_{mode['mode']}_{key}_pre_edit.json"
    pre_path = Path(args.pre_file) if args.pre_file else pre_path
    pre_edit = None
    if pre_path.exists():
        pre_edit = json.loads(pre_path.read_text(encoding="utf-8"))
        if len(pre_edit) != len(inputs["prompts"]):
            raise SystemExit(f"{pre_path} holds {len(pre_edit)} pre-edit results for {len(inputs['prompts'])} requests; remove it")
        LOG.info("pre-edit metrics read from %s", pre_path)
    metrics, _, _ = editor.edit(
        **inputs,
        train_ds=train_ds,
        keep_original_weight=True,
        pre_edit=pre_edit,
        test_generation=args.test_generation,
    )
    if pre_edit is None:
        pre = [{"pre": case["pre"]} for case in metrics]
        write_text_atomic(pre_path, json.dumps(pre, indent=2, default=str))
    result_path = out / f"{stem}_results.json"
    result_path.write_text(json.dumps(metrics, indent=4, default=str), encoding="utf-8")
    summary = dict(unlearning_summary(metrics, mode), editing_method=args.editing_method, datatype=datatype,
                   data_format=data.format, hparams=args.hparams_dir, data=args.data_dir, data_sha256=data.digest,
                   pre_edit_file=str(pre_path), metrics_file=str(result_path))
    (out / f"{stem}_unlearning_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    truth = summary["forget_ground_truth_acc"]
    print(f"{mode['mode'].upper()} ({args.editing_method}, {summary['cases']} cases, target_new: {mode['target_new']!r})")
    if truth["pre"] is not None:
        print(f"ground-truth accuracy: {truth['pre']:.3f} -> {truth['post']:.3f}")
    rows = [("rewrite_acc", summary["rewrite_acc"]), ("rephrase_acc", summary["rephrase_acc"])]
    rows += [(f"{section} {name}", values) for section in ("locality", "portability") for name, values in summary[section].items()]
    rows.append(("fluency ngram_entropy", summary["fluency_ngram_entropy"]))
    for name, values in rows:
        if values["pre"] is not None or values["post"] is not None:
            print(f"{name}: {_fmt(values['pre'])} -> {_fmt(values['post'])}")
    print(f"metrics: {result_path}")
    return summary
