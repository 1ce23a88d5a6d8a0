"""EasyEdit's KnowEdit evaluation for any registered method, as unlearning or as editing.

``benchmarks/run_easyedit_eval.py`` (a thin wrapper of :func:`main`) takes the flags of
EasyEdit's ``examples/run_knowedit_llama2.py`` (``--editing_method --hparams_dir --data_dir
--ds_size --metrics_save_dir --datatype``, plus ``--train_data_path`` for IKE) and differs in:

* the hparams class is **looked up** from ``ALG_DICT[method]`` (the classes named
  ``*HyperParams`` / ``*Hparams`` beside the method's function, matched to the method name),
  so ZeroUnlearn, ZeroUnlearn-GD (registered by importing this package) and every method in
  EasyEdit's ``ALG_DICT`` run unchanged; the YAML's ``alg_name`` must name the same method;
* ``--target-new neutral`` (default) **unlearns**: every request's ``target_new`` is the
  neutral target (the YAML's ``neutral_target``, else the tokenizer's EOS text), which our
  methods also aim at; ``--target-new keep`` uses the dataset's ``target_new`` (editing, as
  EasyEdit's script does). The run says which it did, in the log and in the summary;
* the true answer of each fact is scored before and after through one more portability
  input, ``Forget_Ground_Truth`` (the edit prompt with the record's ``ground_truth``), so
  EasyEdit's own metrics measure forgetting; ``<...>_unlearning_summary.json`` has its mean
  token accuracy pre/post next to EasyEdit's rewrite/locality/portability/fluency means.

Data are read with EasyEdit's ``KnowEditDataset`` and edited through ``BaseEditor.edit`` (one
request at a time, restored after each, ``keep_original_weight=True``), as in the script.
A model name EasyEdit's loader does not recognise (e.g. our ``smollm2`` alias or a local
folder without ``llama``/``gpt``/``qwen``... in its name) is loaded by
:func:`~zerounlearn_editor.model_zoo.load_model_and_tokenizer` and handed over as
``(model, tokenizer)``.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from numbers import Number

__all__ = [
    "FORGET_KEY",
    "find_hparams_class",
    "knowedit_inputs",
    "unlearning_summary",
    "build_parser",
    "main",
]

LOG = logging.getLogger(__name__)

FORGET_KEY = "Forget_Ground_Truth"
"""The portability input that scores the true answer of each edited fact."""

# model names EasyEdit's BaseEditor can load itself (it dispatches on these substrings)
_EASYEDIT_LOADABLE = ("t5", "gpt", "llama", "baichuan", "chatglm", "internlm", "qwen", "mistral")
# methods EasyEdit gives a right-padding tokenizer (the others get left padding)
_RIGHT_PADDING = ("ROME", "MEMIT", "EMMET", "EAMET", "R-ROME", "AlphaEdit", "CORE", "SPHERE")


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
        if not str(answer).strip():
            continue
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
    args: Dict[str, Any] = {
        "prompts": [r["prompt"] for r in records],
        "subject": [r["subject"] for r in records],
        "target_new": [r["target_new"] for r in records],
        "ground_truth": [r.get("ground_truth") for r in records],
    }
    if datatype == "wikibio":
        args["locality_inputs"] = _inputs(records, {"Relation_Specificity": "locality_rs"})
        args["portability_inputs"] = {}
    else:
        args["locality_inputs"] = _inputs(records, {"Relation_Specificity": "locality_rs", "Forgetfulness": "locality_f"})
        args["portability_inputs"] = _inputs(
            records, {"Subject_Aliasing": "portability_s", "reasoning": "portability_r", "Logical_Generalization": "portability_l"}
        )
    truths = [_first_text(g) for g in args["ground_truth"]]
    if any(truths):
        args["portability_inputs"][FORGET_KEY] = {
            "prompt": [r["prompt"] if t else None for r, t in zip(records, truths)],
            "ground_truth": [t if t else None for t in truths],
        }
    else:
        LOG.warning("the records have no ground_truth: forgetting is not scored")
    args["ground_truth"] = [t or None for t in truths]
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
        parts = [_score(v) for v in value]
        parts = [p for p in parts if p is not None]
        return _mean(parts)
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
    for section, names in keys.items():
        summary[section] = {
            name: {p: _phase_mean(metrics, p, section, name) for p in ("pre", "post")} for name in sorted(names) if name != truth
        }
    summary["fluency_ngram_entropy_post"] = _mean(
        [c["post"]["fluency"]["ngram_entropy"] for c in metrics if isinstance(c.get("post", {}).get("fluency"), Mapping)
         and "ngram_entropy" in c["post"]["fluency"]]
    )
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


def _load_easyedit(path: Optional[str]) -> Dict[str, Any]:
    from .easyedit import easyedit_available, register_with_easyedit

    if not easyedit_available(path):
        raise SystemExit("EasyEdit is not importable: pass --easyedit-path or set EASYEDIT_PATH to its source tree")
    register_with_easyedit(path)
    return {
        "alg_dict": importlib.import_module("easyeditor.util.alg_dict").ALG_DICT,
        "BaseEditor": importlib.import_module("easyeditor.editors.editor").BaseEditor,
        "KnowEditDataset": importlib.import_module("easyeditor.dataset.knowedit").KnowEditDataset,
    }


def _model_label(hparams: Any) -> str:
    name = hparams.model_name
    return name.rstrip("/").split("/")[-1] if isinstance(name, str) else "model"


def _prepare_model(hparams: Any) -> Optional[str]:
    """Load the model ourselves when EasyEdit cannot; returns the name to give the editor afterwards."""
    name = hparams.model_name
    if not isinstance(name, str) or any(key in name.lower() for key in _EASYEDIT_LOADABLE):
        return None
    from .model_zoo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(name)
    tok.padding_side = "right" if hparams.alg_name in _RIGHT_PADDING else "left"
    hparams.model_name = (model, tok)
    LOG.info("model %r loaded by zerounlearn_editor (EasyEdit's loader does not know the name)", name)
    return name


def main(argv: Optional[Sequence[str]] = None, easyedit: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Run the evaluation; returns the unlearning summary (also written next to EasyEdit's metrics JSON).

    ``easyedit``: the EasyEdit objects (``alg_dict``, ``BaseEditor``, ``KnowEditDataset``) to
    use instead of importing them (tests).
    """
    args = build_parser().parse_args(argv)
    easyedit = easyedit or _load_easyedit(args.easyedit_path)
    hparams_cls = find_hparams_class(args.editing_method, easyedit["alg_dict"])
    from .hparams import load_config_file

    alg_name = load_config_file(args.hparams_dir).get("alg_name")
    if alg_name != args.editing_method:  # BaseEditor picks the method by the YAML's alg_name
        raise SystemExit(f"{args.hparams_dir}: alg_name is {alg_name!r}, but --editing_method is {args.editing_method!r}")
    hparams = hparams_cls.from_hparams(args.hparams_dir)
    records = easyedit["KnowEditDataset"](args.data_dir, size=args.ds_size)
    inputs = knowedit_inputs([records[i] for i in range(len(records))], args.datatype)
    label = _model_label(hparams)
    display_name = _prepare_model(hparams)

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
    if display_name is not None:
        editor.model_name = display_name  # EasyEdit's evaluation calls model_name.lower()
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
    stem = f"{args.editing_method}_{args.datatype}_{label}"
    pre_file = args.pre_file or str(out / f"{label}_{args.datatype}_{mode['mode']}_pre_edit.json")
    pre_edit = None
    if os.path.exists(pre_file):
        pre_edit = json.loads(Path(pre_file).read_text(encoding="utf-8"))
        if len(pre_edit) != len(inputs["prompts"]):
            raise SystemExit(f"{pre_file} holds {len(pre_edit)} pre-edit results for {len(inputs['prompts'])} requests; remove it")
    metrics, _, _ = editor.edit(
        **inputs,
        train_ds=train_ds,
        keep_original_weight=True,
        pre_file=pre_file,
        pre_edit=pre_edit,
        test_generation=args.test_generation,
    )
    result_path = out / f"{stem}_results.json"
    result_path.write_text(json.dumps(metrics, indent=4, default=str), encoding="utf-8")
    summary = dict(unlearning_summary(metrics, mode), editing_method=args.editing_method, datatype=args.datatype,
                   hparams=args.hparams_dir, data=args.data_dir, metrics_file=str(result_path))
    (out / f"{stem}_unlearning_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    truth = summary["forget_ground_truth_acc"]
    print(f"{mode['mode'].upper()} ({args.editing_method}, {summary['cases']} cases, target_new: {mode['target_new']!r})")
    if truth["pre"] is not None:
        print(f"ground-truth accuracy: {truth['pre']:.3f} -> {truth['post']:.3f}")
    for section in ("locality", "portability"):
        for name, values in summary[section].items():
            if values["post"] is not None:
                print(f"{section} {name}: " + (f"{values['pre']:.3f} -> " if values["pre"] is not None else "") + f"{values['post']:.3f}")
    print(f"metrics: {result_path}")
    return summary
