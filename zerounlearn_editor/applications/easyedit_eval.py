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
The pre-edit metrics are cached in ``--metrics_save_dir`` under a hash of what they depend on (data,
hparams file, mode, and the loaded model's fingerprint and tokenizer, so another model in the folder the
YAML names is scored afresh). Bad paths, hparams, data (a subject not in its prompt included), an unknown
method and an EasyEdit that cannot be imported are one-line errors before any model is loaded.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import inspect
import json
import logging
import re
from dataclasses import dataclass
from numbers import Number
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from zerounlearn_editor.engine.hparams import HParamsError, load_config_file
from zerounlearn_editor.methods.registry import method_names
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


_PROMPT_FIELD = {"knowedit": "prompt", "counterfact": "prompt", "zsre": "src"}
_TARGET_FIELD = {"knowedit": "target_new", "counterfact": "target_new", "zsre": "alt"}


def read_edit_data(path: str, size: Optional[int] = None, need_target: bool = True) -> EditData:
    """Read and check ``path`` (a JSON list; see module docstring); errors name the file, record and fields.

    Every record's subject must occur in its prompt (or the prompt hold a ``{}`` placeholder). With
    ``need_target=False`` (``--target-new neutral``: the dataset's targets are not used) a flat record may
    lack ``target_new`` / ``alt`` or hold an empty one (KnowEdit's loader reads the field, so it stays required).
    """
    if Path(path).is_dir():
        raise SystemExit(f"--data_dir {path} is a folder; give the JSON file of records")
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
    optional = () if need_target or fmt == "knowedit" else (_TARGET_FIELD[fmt],)
    for index, record in enumerate(data):
        if not isinstance(record, Mapping):
            raise SystemExit(f"--data_dir {path}: record {index} is a {type(record).__name__}, not an object")
        missing = [field for field in DATA_FORMATS[fmt] if field not in record and field not in optional]
        if fmt == "knowedit" and "locality" not in record and "portability" not in record:
            missing.append("locality or portability")
        if missing:
            raise SystemExit(f"--data_dir {path}: record {index} ({fmt} format) lacks field(s) {missing}")
        _check_subject(path, index, record, fmt)
    return EditData(str(path), fmt, None if fmt == "knowedit" else [dict(r) for r in data],
                    hashlib.sha256(raw).hexdigest())


def _check_subject(path: str, index: int, record: Mapping[str, Any], fmt: str) -> None:
    """Record ``index``'s subject occurs in its prompt (edits locate the subject there), else a SystemExit naming it."""
    subject, prompt = _first_text(record["subject"]), _first_text(record[_PROMPT_FIELD[fmt]])
    if not subject:
        raise SystemExit(
            f"--data_dir {path}: record {index} field subject is empty; give the subject as it occurs in the prompt"
        )
    if subject not in prompt and "{}" not in prompt:
        raise SystemExit(
            f"--data_dir {path}: record {index}: subject {subject!r} does not occur in its prompt {prompt!r}; "
            "fix the record (the subject as written in the prompt) or drop it"
        )


def flat_inputs(data: EditData, need_target: bool = True) -> Dict[str, Any]:
    """``BaseEditor.edit`` arguments from EasyEdit's flat CounterFact or ZsRE records.

    ``need_target=False`` (``--target-new neutral``): a missing or empty ``target_new`` / ``alt`` is allowed
    (given as ``""``; the caller replaces every target by the neutral one).

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
            column.append(_first_text(r.get(name)))  # lists reduced to their first element
            if not column[-1] and (need_target or name != _TARGET_FIELD[data.format]):
                raise SystemExit(f"{data.path}: record {i} field {name} is empty; fill it in or drop the record")
        portability = r.get("portability") if data.format == "zsre" else None
        if (
            isinstance(portability, Mapping)
            and portability.get("New Question")
            and _first_text(portability.get("New Answer"))
        ):
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
        name: value
        for name, value in namespace.items()
        if inspect.isclass(value)
        and re.search(r"h(yper)?params$", name, re.IGNORECASE)
        and hasattr(value, "from_hparams")
    }


def find_hparams_class(method: str, alg_dict: Mapping[str, Any]) -> type:
    """The hyperparameter class of ``ALG_DICT[method]`` (see module docstring); errors name the candidates."""
    if method not in alg_dict:
        raise ValueError(
            f"--editing_method {method!r} is not in EasyEdit's ALG_DICT; known: {', '.join(sorted(alg_dict))}"
        )
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


KNOWEDIT_DATATYPES = ("counterfact", "recent", "zsre", "wikibio")
"""The ``--datatype`` values of KnowEdit data (the subset a file comes from)."""


def knowedit_inputs(records: Sequence[Mapping[str, Any]], datatype: Optional[str]) -> Dict[str, Any]:
    """``BaseEditor.edit`` arguments from KnowEditDataset records, as EasyEdit's script builds them.

    ``counterfact`` / ``recent`` / ``zsre``: locality Relation_Specificity + Forgetfulness,
    portability Subject_Aliasing + reasoning + Logical_Generalization; ``wikibio``: locality
    Relation_Specificity only. Plus the :data:`FORGET_KEY` portability input where the records
    have a ``ground_truth``.
    """
    if datatype not in KNOWEDIT_DATATYPES:
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
        args["locality_inputs"] = _inputs(
            records, {"Relation_Specificity": "locality_rs", "Forgetfulness": "locality_f"}
        )
        args["portability_inputs"] = _inputs(
            records,
            {
                "Subject_Aliasing": "portability_s",
                "reasoning": "portability_r",
                "Logical_Generalization": "portability_l",
            },
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
            name: {p: _phase_mean(metrics, p, section, name) for p in ("pre", "post")}
            for name in sorted(names)
            if name != truth
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
        description=f"EasyEdit's KnowEdit evaluation for any method of EasyEdit's ALG_DICT (ours: "
        f"{', '.join(method_names())}); unlearns by default (neutral target_new), --target-new keep edits like "
        "EasyEdit's script"
    )
    parser.add_argument("--editing_method", required=True, type=str)
    parser.add_argument("--hparams_dir", required=True, type=str)
    parser.add_argument("--data_dir", required=True, type=str)
    parser.add_argument("--ds_size", default=None, type=int)
    parser.add_argument("--metrics_save_dir", default="./output", type=str)
    parser.add_argument("--datatype", default=None, type=str)
    parser.add_argument("--train_data_path", type=str, help="IKE: its in-context training data")
    parser.add_argument(
        "--pre_file", default=None, type=str, help="cached pre-edit metrics (default: in --metrics_save_dir)"
    )
    parser.add_argument(
        "--target-new",
        dest="target_new",
        choices=["neutral", "keep"],
        default="neutral",
        help="neutral (default): unlearn towards the neutral target; keep: the dataset's target_new (editing)",
    )
    parser.add_argument("--no-test-generation", dest="test_generation", action="store_false",
                        help="skip EasyEdit's generation-based fluency (slow on CPU)")
    parser.add_argument(
        "--easyedit-path", default=None, help="EasyEdit source tree (default $EASYEDIT_PATH / sys.path)"
    )
    return parser


def _load_easyedit(path: Optional[str]) -> Dict[str, Any]:  # noqa: D401 - EasyEdit objects
    from zerounlearn_editor.integrations.easyedit import easyedit_available, register_with_easyedit, registration_error

    if not easyedit_available(path):
        raise SystemExit("EasyEdit is not importable: pass --easyedit-path or set EASYEDIT_PATH to its source tree")
    if not register_with_easyedit(path):
        raise SystemExit(
            f"EasyEdit was found but cannot be imported ({registration_error()}): install EasyEdit's requirements "
            "in this environment (its requirements.txt; .ci/easyedit_env.py builds such a venv)"
        )
    objects = {}
    for key, module, name in (("alg_dict", "easyeditor.util.alg_dict", "ALG_DICT"),
                              ("BaseEditor", "easyeditor.editors.editor", "BaseEditor"),
                              ("KnowEditDataset", "easyeditor.dataset.knowedit", "KnowEditDataset")):
        try:
            objects[key] = getattr(importlib.import_module(module), name)
        except ImportError as exc:
            raise SystemExit(f"EasyEdit's {module} cannot be imported ({type(exc).__name__}: {exc}): install "
                             "EasyEdit's requirements in this environment") from exc
    return objects


def _check_output_paths(args: argparse.Namespace) -> Path:
    """``--metrics_save_dir`` (a folder or nothing yet) and ``--pre_file`` (a file, its folder existing) before any
    work."""
    out = Path(args.metrics_save_dir)
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--metrics_save_dir {out} is a file, not a folder; give a folder (it is created if missing)")
    if args.pre_file:
        pre = Path(args.pre_file)
        if pre.is_dir():
            raise SystemExit(f"--pre_file {pre} is a folder; give the JSON file of cached pre-edit metrics "
                             "(it is written there when missing)")
        if pre.exists() and not pre.is_file():
            raise SystemExit(f"--pre_file {pre} is not a regular file")
        if not pre.exists() and not pre.parent.is_dir():
            raise SystemExit(f"--pre_file {pre}: its folder {pre.parent} does not exist")
    return out


def _config_path(path: str) -> Path:
    """The file :func:`~zerounlearn_editor.engine.hparams.load_config_file` reads for ``path`` (``.yaml`` appended
    without a YAML/JSON suffix, as EasyEdit does)."""
    file = Path(path)
    return file if file.suffix.lower() in (".yaml", ".yml", ".json") else file.with_name(file.name + ".yaml")


def _read_hparams(path: str, hparams_cls: type) -> Any:
    """``hparams_cls.from_hparams(path)``; a file the class cannot be built from is a SystemExit naming it."""
    try:
        return hparams_cls.from_hparams(path)
    except HParamsError as exc:
        raise SystemExit(f"--hparams_dir: {exc}") from exc
    except (TypeError, KeyError, ValueError, AssertionError) as exc:  # EasyEdit's classes: cls(**config)
        raise SystemExit(f"--hparams_dir {path}: {hparams_cls.__name__} cannot be built from it "
                         f"({type(exc).__name__}: {exc}); check its keys against {hparams_cls.__name__}") from exc


def _tokenizer_digest(tok: Any) -> str:
    """What the pre-edit metrics depend on in the tokenizer: class, padding side, special tokens, vocabulary."""
    digest = hashlib.sha256()
    digest.update(f"{type(tok).__name__}|{getattr(tok, 'padding_side', None)}|".encode("utf-8"))
    digest.update(json.dumps([getattr(tok, k, None) for k in ("eos_token", "pad_token", "bos_token")],
                             default=str).encode("utf-8"))
    vocab = tok.get_vocab() if callable(getattr(tok, "get_vocab", None)) else {}
    digest.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


def _model_digest(editor: Any) -> str:
    """The fingerprint of the editor's loaded model (:func:`~zerounlearn_editor.engine.stats.model_fingerprint`:
    config and sampled weights, not its name) and of its tokenizer: keys the pre-edit metrics cache."""
    from torch import nn

    from zerounlearn_editor.engine.stats import model_fingerprint

    model = getattr(editor, "model", None)
    if not isinstance(model, nn.Module):
        raise SystemExit(f"the editor holds no model to fingerprint (editor.model is {type(model).__name__}); "
                         "the pre-edit metrics cannot be keyed by the model")
    return f"{model_fingerprint(model)}|{_tokenizer_digest(editor.tok)}"


def _check_fewshot(hparams: Any, inputs: Mapping[str, Any], data_path: str) -> None:
    """A deep YAML (``fewshot_contexts``) has its built-in few-shot facts for every request, each
    edited in its own call (:func:`~zerounlearn_editor.engine.contexts.check_fewshot_facts`), before the model loads."""
    count = getattr(hparams, "fewshot_contexts", 0)  # another method's hparams: none
    if not count:
        return
    from zerounlearn_editor.engine.contexts import check_fewshot_facts
    from zerounlearn_editor.engine.requests import RequestError, normalize_requests

    for i, (prompt, subject, truth) in enumerate(zip(inputs["prompts"], inputs["subject"], inputs["ground_truth"])):
        try:
            request = normalize_requests([{"prompt": prompt, "subject": subject, "ground_truth": truth or None}])
            check_fewshot_facts([dataclasses.replace(r, index=i) for r in request], count)
        except RequestError as exc:
            raise SystemExit(f"--data_dir {data_path}: record {i}: {exc}") from exc


def _read_pre_edit(path: Path, n_requests: int) -> List[Any]:
    """The cached pre-edit metrics of ``path`` (a JSON list, one entry per request), else a SystemExit naming it."""
    try:
        pre_edit = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SystemExit(f"{path}: not a JSON file of pre-edit metrics ({exc}); remove it") from exc
    if not isinstance(pre_edit, list) or not all(isinstance(case, Mapping) and "pre" in case for case in pre_edit):
        raise SystemExit(f"{path}: expected a JSON list of {{'pre': ...}} pre-edit results; remove it")
    if len(pre_edit) != n_requests:
        raise SystemExit(f"{path} holds {len(pre_edit)} pre-edit results for {n_requests} requests; remove it")
    return pre_edit


def _fmt(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _check_method_and_data(args: argparse.Namespace) -> EditData:
    """The YAML names ``--editing_method`` and ``--datatype`` fits the data's format (no model, no EasyEdit)."""
    try:
        alg_name = load_config_file(args.hparams_dir).get("alg_name")
    except HParamsError as exc:
        raise SystemExit(f"--hparams_dir: {exc}") from exc
    if alg_name != args.editing_method:  # BaseEditor picks the method by the YAML's alg_name
        raise SystemExit(
            f"{args.hparams_dir}: alg_name is {alg_name!r}, but --editing_method is {args.editing_method!r}"
        )
    data = read_edit_data(args.data_dir, args.ds_size, need_target=args.target_new == "keep")
    if data.format == "knowedit":
        if args.datatype not in KNOWEDIT_DATATYPES:
            raise SystemExit(
                f"--data_dir {args.data_dir} is in KnowEdit format: --datatype must be "
                f"{', '.join(KNOWEDIT_DATATYPES)} (the KnowEdit subset it comes from), got {args.datatype!r}"
            )
    elif args.datatype not in (None, data.format):
        raise SystemExit(
            f"--data_dir {args.data_dir} is in EasyEdit's {data.format} format, but --datatype is {args.datatype!r}"
        )
    return data


def _editor_inputs(args: argparse.Namespace, data: EditData, easyedit: Dict[str, Any]) -> Tuple[Dict[str, Any], str]:
    """``(BaseEditor.edit's keyword inputs, datatype)`` of the data (KnowEdit records through EasyEdit's loader)."""
    if data.format != "knowedit":
        return flat_inputs(data, need_target=args.target_new == "keep"), data.format
    records = easyedit["KnowEditDataset"](args.data_dir, size=args.ds_size)
    inputs = knowedit_inputs([records[i] for i in range(len(records))], args.datatype)
    if args.target_new == "keep":
        empty = [i for i, target in enumerate(inputs["target_new"]) if not _first_text(target)]
        if empty:
            raise SystemExit(f"--data_dir {args.data_dir}: record(s) {empty[:10]} have an empty target_new, "
                             "which --target-new keep edits towards; fill them in or use --target-new neutral")
    return inputs, args.datatype


def _in_context_train_ds(args: argparse.Namespace, hparams: Any, easyedit: Dict[str, Any]) -> Any:
    """IKE's in-context examples (encoded as EasyEdit's script does); ICE runs without; None for other methods."""
    if args.editing_method == "ICE":
        hparams.use_icl_examples = False
    if args.editing_method != "IKE":
        return None
    if not args.train_data_path:
        raise SystemExit("IKE needs --train_data_path (its in-context examples)")
    from sentence_transformers import SentenceTransformer

    encode_ike_facts = importlib.import_module("easyeditor.models.ike").encode_ike_facts
    train_ds = easyedit["KnowEditDataset"](args.train_data_path)
    sentence_model = SentenceTransformer(hparams.sentence_model_name).to(f"cuda:{hparams.device}")
    encode_ike_facts(sentence_model, train_ds, hparams)
    return train_ds


def _target_mode(args: argparse.Namespace, hparams: Any, editor: Any, inputs: Dict[str, Any]) -> Dict[str, str]:
    """``--target-new``: ``neutral`` sets every ``target_new`` to the neutral target (unlearning), ``keep`` edits
    towards the dataset's; returns the mode record written in the summary."""
    if args.target_new != "neutral":
        LOG.info("EDITING: the dataset's target_new is kept (--target-new keep)")
        return {"mode": "edit", "target_new": "dataset"}
    neutral = getattr(hparams, "neutral_target", None) or editor.tok.eos_token
    if not neutral:
        raise SystemExit("--target-new neutral: the hparams have no neutral_target and the tokenizer no EOS token")
    inputs["target_new"] = [neutral] * len(inputs["prompts"])
    LOG.info("UNLEARNING: every target_new is the neutral target %r (--target-new keep edits instead)", neutral)
    return {"mode": "unlearn", "target_new": neutral}


def _pre_edit_path(args: argparse.Namespace, out: Path, data: EditData, datatype: str, mode: Dict[str, str],
                   label: str, editor: Any) -> Path:
    """``--pre_file``, else the pre-edit metrics cache in ``out`` named by a hash of what they depend on (data,
    size, YAML, mode, generation, datatype, the loaded model and tokenizer)."""
    if args.pre_file:
        return Path(args.pre_file)
    key_parts = [data.digest, str(args.ds_size), sha256_of_file(_config_path(args.hparams_dir)),
                 json.dumps(mode, sort_keys=True), str(args.test_generation), str(datatype), _model_digest(editor)]
    key = hashlib.sha256("\0".join(key_parts).encode("utf-8")).hexdigest()[:16]
    return out / f"{label}_{datatype}_{mode['mode']}_{key}_pre_edit.json"


def _print_summary(summary: Dict[str, Any], mode: Dict[str, str], editing_method: str, result_path: Path) -> None:
    """The summary's pre -> post lines on stdout."""
    truth = summary["forget_ground_truth_acc"]
    print(f"{mode['mode'].upper()} ({editing_method}, {summary['cases']} cases, target_new: {mode['target_new']!r})")
    if truth["pre"] is not None:
        print(f"ground-truth accuracy: {truth['pre']:.3f} -> {truth['post']:.3f}")
    rows = [("rewrite_acc", summary["rewrite_acc"]), ("rephrase_acc", summary["rephrase_acc"])]
    rows += [
        (f"{section} {name}", values)
        for section in ("locality", "portability")
        for name, values in summary[section].items()
    ]
    rows.append(("fluency ngram_entropy", summary["fluency_ngram_entropy"]))
    for name, values in rows:
        if values["pre"] is not None or values["post"] is not None:
            print(f"{name}: {_fmt(values['pre'])} -> {_fmt(values['post'])}")
    print(f"metrics: {result_path}")


def main(argv: Optional[Sequence[str]] = None, easyedit: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Run the evaluation; returns the unlearning summary (also written next to EasyEdit's metrics JSON).

    ``easyedit``: the EasyEdit objects (``alg_dict``, ``BaseEditor``, ``KnowEditDataset``) to
    use instead of importing them (tests).
    """
    args = build_parser().parse_args(argv)
    # every check that needs no model comes first: paths, hparams file, data, method, hparams class
    out = _check_output_paths(args)
    data = _check_method_and_data(args)
    easyedit = easyedit or _load_easyedit(args.easyedit_path)
    try:
        hparams_cls = find_hparams_class(args.editing_method, easyedit["alg_dict"])
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    hparams = _read_hparams(args.hparams_dir, hparams_cls)
    inputs, datatype = _editor_inputs(args, data, easyedit)
    _check_fewshot(hparams, inputs, args.data_dir)
    label = hparams.model_name.rstrip("/").split("/")[-1] if isinstance(hparams.model_name, str) else "model"
    pre_edit = None
    if args.pre_file and Path(args.pre_file).exists():  # a given cache file is read before the model loads
        pre_edit = _read_pre_edit(Path(args.pre_file), len(inputs["prompts"]))
    train_ds = _in_context_train_ds(args, hparams, easyedit)

    out.mkdir(parents=True, exist_ok=True)
    editor = easyedit["BaseEditor"].from_hparams(hparams)
    mode = _target_mode(args, hparams, editor, inputs)
    pre_path = _pre_edit_path(args, out, data, datatype, mode, label, editor)
    if pre_edit is None and pre_path.exists():
        pre_edit = _read_pre_edit(pre_path, len(inputs["prompts"]))
    if pre_edit is not None:
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
    stem = f"{args.editing_method}_{datatype}_{label}"
    result_path = out / f"{stem}_results.json"
    result_path.write_text(json.dumps(metrics, indent=4, default=str), encoding="utf-8")
    summary = dict(unlearning_summary(metrics, mode), editing_method=args.editing_method, datatype=datatype,
                   data_format=data.format, hparams=args.hparams_dir, data=args.data_dir, data_sha256=data.digest,
                   pre_edit_file=str(pre_path), metrics_file=str(result_path))
    (out / f"{stem}_unlearning_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    _print_summary(summary, mode, args.editing_method, result_path)
    return summary
