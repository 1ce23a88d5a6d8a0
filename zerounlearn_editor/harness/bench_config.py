"""What one bench run does: :class:`BenchConfig` and the parsers of its command-line forms."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from zerounlearn_editor.methods.registry import method_names

__all__ = [
    "BenchConfigError",
    "BenchConfig",
    "default_methods",
    "default_round_methods",
    "default_audit_methods",
    "default_pca_methods",
    "DEFAULT_PPL_TOKENS",
    "parse_seeds",
    "parse_methods",
    "RETIRED_METHODS",
    "retired_method_error",
    "parse_method_hparams",
    "RETAIN_POLICIES",
    "RetainDraw",
    "parse_retain_spec",
]

DEFAULT_PPL_TOKENS = 20000


class BenchConfigError(ValueError):
    """A bench configuration (arguments or run file) is invalid; the message says which part."""


def default_methods() -> List[str]:
    """The bench's default ``--methods``: ``base`` and every registered method's plain row, the baselines first
    (:mod:`zerounlearn_editor.methods.registry`; no variant rows)."""
    return ["base", *method_names(baselines=True)]


def default_round_methods() -> List[str]:
    """``--rounds``' default methods: the registered editing methods (no baselines, no variant rows)."""
    return method_names()


def default_audit_methods() -> List[str]:
    """``audit``'s default methods: ``base`` and the registered editing methods."""
    return ["base", *method_names()]


def default_pca_methods() -> List[str]:
    """``pca``'s default methods: the registered editing methods, then GA and EasyEdit's MEMIT and AlphaEdit as the
    figure's points of comparison."""
    return [*method_names(), "GA", "MEMIT", "AlphaEdit"]


RETAIN_POLICIES = ("siblings", "same-answer")
_SPEC = re.compile(r"^(" + "|".join(re.escape(p) for p in RETAIN_POLICIES) + r"):(\d+)$")
_SPEC_HELP = "'siblings:K' or 'same-answer:K' with K >= 1 (e.g. siblings:5, same-answer:5)"
_EXCLUSIONS = (
    "excluding the seed's sampled cases, every record whose subject occurs in a scored "
    "(forget, paraphrase or neighbourhood) prompt and every record whose prompt names a forgotten subject; "
    "prompts only, no answers"
)


@dataclass(frozen=True)
class RetainDraw:
    """How a bench draws its retain sets: up to ``k`` records per forget case under ``policy``.

    Attributes:
        k: records per forget case (>= 1).
        policy: one of :data:`RETAIN_POLICIES` (``"siblings"`` or ``"same-answer"``).
    """

    k: int
    policy: str = "siblings"

    def __post_init__(self) -> None:
        if self.policy not in RETAIN_POLICIES:
            raise BenchConfigError(f"retain: unknown policy {self.policy!r}; expected one of {list(RETAIN_POLICIES)}")
        if self.k < 1:
            raise BenchConfigError(f"retain: K must be >= 1, got {self.k}")

    @property
    def spec(self) -> str:
        """The spec string this draw parses from (``parse_retain_spec(d.spec) == d``)."""
        return f"{self.policy}:{self.k}"

    def describe(self) -> str:
        """One line for the report: how the retain set was drawn."""
        if self.policy == "same-answer":
            return (
                f"retain set: per forget case up to {self.k} other records from the whole dataset whose true "
                "answer equals the forget case's (case-insensitive), same relation first, then any relation, "
                f"filled up to {self.k} with same-relation records of other answers; {_EXCLUSIONS}"
            )
        return (
            f"retain set: per forget case {self.k} other records of the same relation from the whole dataset, "
            + _EXCLUSIONS
        )


def parse_retain_spec(spec: Optional[str]) -> Optional[RetainDraw]:
    """``"siblings:K"`` / ``"same-answer:K"`` (K >= 1) -> :class:`RetainDraw`;
    ``None``/``""``/``"none"`` -> ``None``."""
    if spec is None or str(spec).strip().lower() in ("", "none"):
        return None
    match = _SPEC.match(str(spec).strip())
    if not match or int(match.group(2)) < 1:
        raise BenchConfigError(f"retain: expected {_SPEC_HELP}, got {spec!r}")
    return RetainDraw(int(match.group(2)), match.group(1))


def parse_seeds(spec: Union[str, int, Iterable[int]]) -> List[int]:
    """Seeds from ``"1-10"``, ``"1,3,5"``, ``"1-3,7"``, an int or a list of ints (order kept, no repeats)."""
    if isinstance(spec, bool):
        raise BenchConfigError(f"seeds: expected a range like '1-10' or a list of ints, got {spec!r}")
    if isinstance(spec, int):
        items: List[int] = [spec]
    elif isinstance(spec, str):
        items = []
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            try:
                if "-" in part[1:]:
                    cut = part.index("-", 1)
                    first, last = int(part[:cut]), int(part[cut + 1 :])
                    if last < first:
                        raise BenchConfigError(f"seeds: empty range {part!r}")
                    items.extend(range(first, last + 1))
                else:
                    items.append(int(part))
            except ValueError as exc:
                if isinstance(exc, BenchConfigError):
                    raise
                raise BenchConfigError(f"seeds: cannot read {part!r} in {spec!r} (use e.g. '1-10' or '1,2,5')") from exc
    else:
        items = list(spec)
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in items):
            raise BenchConfigError(f"seeds: expected integers, got {items!r}")
    seeds = list(dict.fromkeys(items))
    if not seeds:
        raise BenchConfigError(f"seeds: no seed in {spec!r}")
    return seeds


RETIRED_METHODS: Dict[str, str] = {
    "ZeroUnlearn+R": "ZeroUnlearn-GD+R beats it at every n measured and it breaks fluency beyond ~50 facts "
    "(benchmarks/RESULTS.md, 'Surgical forgetting'; its rows stay in benchmarks/notebook/); use ZeroUnlearn-GD+R",
}
"""Bench methods that were retired: naming one is an error with this message."""


def retired_method_error(name: str) -> Optional[str]:
    """The error message for a retired method name (case-insensitive), else ``None``."""
    for retired, why in RETIRED_METHODS.items():
        if name.strip().lower() == retired.lower():
            return f"method {retired!r} was retired: {why}"
    return None


def parse_methods(spec: Union[str, Sequence[str]], known: Iterable[str]) -> List[str]:
    """Method names from ``"base,ZeroUnlearn"`` or a list, matched case-insensitively to ``known``."""
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    names = [n for n in names if n]
    canonical = {k.lower(): k for k in known}
    out: List[str] = []
    for name in names:
        retired = retired_method_error(name)
        if retired and name.lower() not in canonical:
            raise BenchConfigError(f"methods: {retired}")
        if name.lower() not in canonical:
            raise BenchConfigError(f"methods: unknown method {name!r}; known: {', '.join(canonical.values())}")
        if canonical[name.lower()] not in out:
            out.append(canonical[name.lower()])
    if not out:
        raise BenchConfigError("methods: no method given")
    return out


def parse_method_hparams(items: Union[None, Sequence[str], Dict[str, str]]) -> Dict[str, str]:
    """``["GA=path.yaml", ...]`` (or a mapping) into ``{method: path}``."""
    if not items:
        return {}
    if isinstance(items, dict):
        return {str(k): str(v) for k, v in items.items()}
    out: Dict[str, str] = {}
    for item in items:
        name, sep, path = str(item).partition("=")
        if not sep or not name.strip() or not path.strip():
            raise BenchConfigError(f"method hparams: expected NAME=PATH, got {item!r}")
        out[name.strip()] = path.strip()
    return out


@dataclass
class BenchConfig:
    """One bench run.

    Attributes:
        hparams: the main ZeroUnlearn/ZeroUnlearn-GD YAML: model, statistics settings, layers.
        data: dataset name (``counterfact``, ``zsre``, ...) or a data file.
        seeds: sampling seeds; each seed draws ``n`` cases and is one result file.
        methods: method names (``base`` = the unedited model).
        out: output folder (``seed_<k>.json``, ``summary.json``, ``summary.md``).
        n: cases per seed, all edited as one batch (``None`` = the whole dataset).
        ppl_tokens: WikiText-2 tokens for perplexity (0 = no perplexity).
        ppl_text: perplexity text file (default: the embedded WikiText-2 test split,
        :func:`~zerounlearn_editor.data.builtin.default_ppl_text`).
        fluency: also measure n-gram entropy of greedy generations of the forget prompts.
        fluency_tokens: new tokens per fluency generation.
        method_hparams: ``{method: YAML path}`` overriding the default lookup.
        data_path: with a dataset name, a file to read instead of the default one.
        device: where the CLI loads the model.
        eval_batch_size: probes per forward pass.
        progress: show progress bars.
        name: a label for the report.
        known_only: sample only cases whose true answers the unedited model predicts
            (teacher-forced token accuracy at least ``known_min_accuracy`` on the forget prompts).
        known_min_accuracy: the threshold of ``known_only``; 1.0 (default) makes efficacy start
            at 100, 0.5 keeps cases the model gets at least half right (small models know few
            facts fully: SmolLM2-135M-Instruct 47 of the 1129 ROME-format CounterFact records;
            on RWKU, whose forget probes pool a target's level 1+2 probes, 0.3 keeps 67 of 200).
        retain: how the retain-aware method (``ZeroUnlearn-GD+R``) gets its
            retain set: ``"siblings:K"`` = K same-relation records per forget case from the
            whole dataset; ``"same-answer:K"`` = up to K records sharing the forget case's true
            answer (same relation first, then any relation), filled up with same-relation
            records; never a scored case or subject (:mod:`.retain_sets`); ``None`` = none.
        dtype: precision the CLI loads the model in (``float32``, ``bfloat16``, ``float16``;
            ``None`` = as stored); part of the run settings every stored seed result must share.
        utility: comma list of downstream tasks (``sst2,mmlu``, see :mod:`zerounlearn_editor.evaluation.utility`)
            scored for every method as extra columns ``util_<task>`` (accuracy x100); ``None`` = none.
        utility_n: items per utility task (3-shot prompts, drawn with seed 0 for every seed).
        group_generation: for data with probe groups (RWKU), also score greedy generation per
            group: % of probes whose 16-token continuation contains the answer (``contains_<group>``
            columns, e.g. ``FL1 gen``); costs a generation pass over every group probe per method.
        audit: an :class:`~zerounlearn_editor.evaluation.audit.AuditSettings`: the robustness audit's probes as
            columns ``audit:<probe>`` (recovered %, :mod:`zerounlearn_editor.harness.audit_columns`); ``None`` = none.
    """

    hparams: str
    data: str
    seeds: List[int]
    methods: List[str]
    out: str
    n: Optional[int] = 50
    ppl_tokens: int = DEFAULT_PPL_TOKENS
    ppl_text: Optional[str] = None
    fluency: bool = False
    fluency_tokens: int = 32
    method_hparams: Dict[str, str] = field(default_factory=dict)
    data_path: Optional[str] = None
    device: str = "cpu"
    eval_batch_size: int = 32
    progress: bool = True
    name: Optional[str] = None
    known_only: bool = False
    known_min_accuracy: float = 1.0
    retain: Optional[str] = None
    dtype: Optional[str] = None
    utility: Optional[str] = None
    utility_n: int = 50
    group_generation: bool = False
    audit: Optional[Any] = None

    def validate(self) -> None:
        """Check value ranges (names of methods are checked against the registry by the runner)."""
        if self.n is not None and self.n < 1:
            raise BenchConfigError(f"n must be >= 1, got {self.n}")
        if self.ppl_tokens < 0:
            raise BenchConfigError(f"ppl_tokens must be >= 0, got {self.ppl_tokens}")
        if not 0.0 < self.known_min_accuracy <= 1.0:
            raise BenchConfigError(f"known_min_accuracy must be in (0, 1], got {self.known_min_accuracy}")
        if self.fluency_tokens < 1:
            raise BenchConfigError(f"fluency_tokens must be >= 1, got {self.fluency_tokens}")
        if self.eval_batch_size < 1:
            raise BenchConfigError(f"eval_batch_size must be >= 1, got {self.eval_batch_size}")
        if not self.seeds:
            raise BenchConfigError("seeds: no seed given")
        if self.audit is not None:
            try:
                self.audit.validate()
                if self.n is not None:
                    self.audit.check_fact_count(self.n)
            except ValueError as exc:
                raise BenchConfigError(str(exc)) from None
        if not self.methods:
            raise BenchConfigError("methods: no method given")
        draw = parse_retain_spec(self.retain)
        needing = [m for m in self.methods if str(m).endswith("+R")]
        if needing and draw is None:
            raise BenchConfigError(
                f"methods {needing} need a retain set: add --retain siblings:K or same-answer:K (runfile key 'retain')"
            )
